package proxy_test

import (
	"context"
	"log"
	"net/http"
	"time"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/engine"
	"github.com/aglrl/agl/engine/upstream"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store/sqlite"
)

// Wiring the gateway's LLM routes: a store, a backend, and a mux entry for
// /r/. Harnesses then get OPENAI_BASE_URL=http://GW/r/{rollout}/{attempt}/v1,
// ANTHROPIC_BASE_URL=http://GW/r/{rollout}/{attempt} and
// AGL_EVENTS_URL=http://GW/r/{rollout}/{attempt}/events.
func Example() {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, "agl.db", sqlite.Options{})
	if err != nil {
		log.Fatal(err)
	}
	var b proxy.Backend
	if useVLLM := false; useVLLM {
		// vLLM/SGLang render the chat template themselves.
		c, err := upstream.New(upstream.Config{Models: []upstream.Model{{Name: "Qwen/Qwen3-8B", Endpoints: []string{"http://10.0.0.5:8000/v1", "http://10.0.0.6:8000/v1"}}}})
		if err != nil {
			log.Fatal(err)
		}
		b = proxy.NewUpstreamBackend(c)
	} else {
		// A token engine (the embedded model, or upstream.NewTokenEngine
		// over vLLM's token-id completions) with agl's chat template.
		tmpl, err := chat.NewSmall()
		if err != nil {
			log.Fatal(err)
		}
		var eng engine.TokenEngine // = the embedded model
		b = proxy.NewTokenBackend(eng, tmpl, tmpl.Tokenizer(), 0)
	}
	p := proxy.New(proxy.Config{RequestTimeout: 10 * time.Minute}, st, b)
	mux := http.NewServeMux()
	mux.Handle("/r/", p)
	// Weight swap: p.Pause(); p.Drain(ctx); swap; p.Resume().
	_ = mux
}

package al_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aglrl/agl/gateway/al"
)

// BenchmarkAgentRoute: one chat call through AL's agent route (scoped
// key; and the server key on a rollout an external controller runs, as
// AL's reconcilers' agents call) and through agl's own /r/ route, same
// gateway, store and loopback upstream: the cost of AL's checks (auth by
// rollout, model registry, pause state, body rewrite) on top of agl's
// proxy.
func BenchmarkAgentRoute(b *testing.B) {
	e := newEnv(b, al.Config{}, true)
	keys, aids := e.started(b, "r")
	e.admin(b, "POST", "/al/api/models", `[{"model":"m","endpoint":"`+e.upstream+`"}]`)
	// x runs under an external controller (AL's reconcilers), whose agents
	// call with the server key.
	e.admin(b, "POST", "/al/api/rollouts", `[{"rollout_id":"x","input":1}]`)
	e.admin(b, "PATCH", "/al/api/rollouts/x", `{"status":{"state":"running"}}`)
	routes := []struct{ name, path, key string }{
		{"native", "/r/r/" + aids[0] + "/v1/chat/completions", keys[0]},
		{"al", "/al/proxy/rollout/r/attempt/0/mode/train/openai/v1/chat/completions", keys[0]},
		{"al-external", "/al/proxy/rollout/x/attempt/0/mode/train/openai/v1/chat/completions", adminKey},
	}
	hc := &http.Client{}
	for _, rt := range routes {
		b.Run(rt.name, func(b *testing.B) {
			for b.Loop() {
				req, _ := http.NewRequest("POST", e.srv.URL+rt.path, strings.NewReader(chatBody))
				req.Header.Set("Authorization", "Bearer "+rt.key)
				res, err := hc.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != 200 {
					b.Fatalf("%s: %d", rt.name, res.StatusCode)
				}
			}
		})
	}
}

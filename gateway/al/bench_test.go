package al_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aglrl/agl/gateway/al"
)

// BenchmarkAgentRoute: one chat call through AL's agent route (scoped
// key) and through agl's own /r/ route, same gateway, store and loopback
// upstream: the cost of AL's checks (auth by rollout, model registry,
// pause state, body rewrite) on top of agl's proxy.
func BenchmarkAgentRoute(b *testing.B) {
	e := newEnv(b, al.Config{}, true)
	keys, aids := e.started(b, "r")
	e.admin(b, "POST", "/al/api/models", `[{"model":"m","endpoint":"`+e.upstream+`"}]`)
	routes := []struct{ name, path string }{
		{"native", "/r/r/" + aids[0] + "/v1/chat/completions"},
		{"al", "/al/proxy/rollout/r/attempt/0/mode/train/openai/v1/chat/completions"},
	}
	hc := &http.Client{}
	for _, rt := range routes {
		b.Run(rt.name, func(b *testing.B) {
			for b.Loop() {
				req, _ := http.NewRequest("POST", e.srv.URL+rt.path, strings.NewReader(chatBody))
				req.Header.Set("Authorization", "Bearer "+keys[0])
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

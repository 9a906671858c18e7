package proxy_test

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/engine/upstream"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
)

// TestMaxTokensClamped: a harness asking for more response tokens than a
// model's max_context leaves beside the prompt (Claude Code asks 128000)
// gets the room left, in every API shape and both upstream modes, and the
// event records what was asked and what was used. The upstream refuses a
// max_tokens that does not fit, as vLLM does, so without the clamp every
// call fails. A bound that fits is sent unchanged.
func TestMaxTokensClamped(t *testing.T) {
	const maxLen = 32768
	ml := qwen3ChatML(t)
	shapes := []struct {
		name, path string
		hdr        func(key string) map[string]string
		body       func(max int) string
	}{
		{"openai", "/v1/chat/completions",
			func(k string) map[string]string { return map[string]string{"Authorization": "Bearer " + k} },
			func(max int) string {
				return `{"model":"m","max_tokens":` + strconv.Itoa(max) + `,"messages":[{"role":"user","content":"Hi"}]}`
			}},
		{"anthropic", "/v1/messages",
			func(k string) map[string]string {
				return map[string]string{"x-api-key": k, "anthropic-version": "2023-06-01"}
			},
			func(max int) string {
				return `{"model":"m","max_tokens":` + strconv.Itoa(max) + `,"messages":[{"role":"user","content":"Hi"}]}`
			}},
		{"gemini", "/v1beta/models/m:generateContent",
			func(k string) map[string]string { return map[string]string{"x-goog-api-key": k} },
			func(max int) string {
				return `{"contents":[{"role":"user","parts":[{"text":"Hi"}]}],"generationConfig":{"maxOutputTokens":` + strconv.Itoa(max) + `}}`
			}},
	}
	for _, mode := range []string{upstream.ModeChat, upstream.ModeToken} {
		for _, sh := range shapes {
			t.Run(mode+"/"+sh.name, func(t *testing.T) {
				v := newVLLMServer(t, ml)
				v.maxModelLen = maxLen
				v.push(chat.Message{Role: chat.RoleAssistant, Content: "Hello."}, chat.Message{Role: chat.RoleAssistant, Content: "Hello."})
				cl, err := upstream.New(upstream.Config{Models: []upstream.Model{{Name: "Qwen/Qwen3-8B", Endpoints: []string{v.url()}, MaxContext: maxLen}}, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				var b proxy.Backend = proxy.NewUpstreamBackend(cl)
				if mode == upstream.ModeToken {
					b = proxy.NewTokenBackend(upstream.NewTokenEngine(cl, "", maxLen), ml, ml.Tokenizer(), 0)
				}
				e := newEnv(t, proxy.Config{}, b)
				c := e.claim(t, store.ModeTrain)
				for _, ask := range []int{128000, 50} {
					st, _, body := post(t, "POST", base(e.srv, c)+sh.path, sh.hdr(c.Key), sh.body(ask))
					if st != 200 {
						t.Fatalf("max_tokens %d: %d %s", ask, st, body)
					}
				}
				seen, calls := v.recorded(), e.calls(t, c)
				if len(seen) != 2 || len(calls) != 2 {
					t.Fatalf("upstream saw %d calls, %d events; want 2", len(seen), len(calls))
				}
				room := maxLen - len(seen[0].prompt)
				wantSent := []int{room, 50}
				if mode == upstream.ModeChat {
					wantSent[0] = 0 // not sent: the upstream answers in the room left
				}
				for i, mc := range calls {
					if seen[i].maxTokens != wantSent[i] {
						t.Errorf("call %d: upstream got max_tokens %d, want %d", i, seen[i].maxTokens, wantSent[i])
					}
					var s struct {
						MaxTokens int `json:"max_tokens"`
					}
					if err := json.Unmarshal(mc.Sampling, &s); err != nil {
						t.Fatal(err)
					}
					clamp := slices.IndexFunc(mc.Ignored, func(s string) bool { return strings.HasPrefix(s, "max_tokens (") })
					switch i {
					case 0:
						want := "max_tokens (128000 clamped to " + strconv.Itoa(room) + ", the room left in the context)"
						if s.MaxTokens != room || clamp < 0 || mc.Ignored[clamp] != want {
							t.Errorf("call 0: sampling %s, ignored %q; want max_tokens %d and %q", mc.Sampling, mc.Ignored, room, want)
						}
					case 1:
						if s.MaxTokens != 50 || clamp >= 0 {
							t.Errorf("call 1: sampling %s, ignored %q; want max_tokens 50, not clamped", mc.Sampling, mc.Ignored)
						}
					}
				}
			})
		}
	}
}

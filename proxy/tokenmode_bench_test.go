package proxy_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/engine/upstream"
	"github.com/aglrl/agl/store"
)

// chatBodies are the Chat Completions bodies a harness sends for the
// fixture conversation: call k carries the messages before the fixture's
// k-th reply (replies without their reasoning, as harnesses send them).
func chatBodies(tb testing.TB, fx convFixture, extra map[string]any) [][]byte {
	type fn struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	}
	type tool struct {
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	var tools []tool
	for _, t := range fx.Tools {
		tools = append(tools, tool{Type: "function", Function: fn{t.Name, t.Description, t.Parameters}})
	}
	var msgs []map[string]any
	var out [][]byte
	for _, m := range fx.Messages {
		if m.Role == chat.RoleAssistant {
			body := map[string]any{"model": "Qwen/Qwen3-8B", "messages": msgs, "tools": tools}
			for k, v := range extra {
				body[k] = v
			}
			b, err := json.Marshal(body)
			if err != nil {
				tb.Fatal(err)
			}
			out = append(out, b)
		}
		w := map[string]any{"role": m.Role, "content": m.Content}
		if m.ToolCallID != "" {
			w["tool_call_id"] = m.ToolCallID
		}
		var tcs []wireToolCall
		for _, tc := range m.ToolCalls {
			wt := wireToolCall{ID: tc.ID, Type: "function"}
			wt.Function.Name, wt.Function.Arguments = tc.Name, tc.Arguments
			tcs = append(tcs, wt)
		}
		if len(tcs) > 0 {
			w["tool_calls"] = tcs
		}
		msgs = append(msgs, w)
	}
	return out
}

// BenchmarkTokenVsChatMode measures what the gateway adds in token mode
// and in chat mode in front of the same vLLM-format upstream, over the
// 10-call tool conversation of TestTokenModeDrift (one op = the whole
// conversation each way). The baseline is the harness calling the
// upstream's /v1/chat/completions directly, in the same run (rounds
// alternate direct, token mode, chat mode). The fake upstream renders and
// tokenizes chat requests with the Qwen3 template (as vLLM renders its
// Jinja and tokenizes) and nothing for token-id prompts. Reported per
// call: wall time of each path and the gateway's added time over direct,
// and the prompt tokens tokenized per call in each mode.
//
//	go test -run '^$' -bench TokenVsChatMode -benchtime 20x ./proxy
func BenchmarkTokenVsChatMode(b *testing.B) {
	ml := qwen3ChatML(b)
	fx := loadConvFixture(b)
	replies, _ := fx.replies()
	// A harness calling vLLM directly asks for ids and log-probs itself.
	direct := chatBodies(b, fx, map[string]any{"logprobs": true, "return_token_ids": true})
	bodies := chatBodies(b, fx, nil)
	v := newVLLMServer(b, ml)
	type path struct {
		name, url, key string
		bodies         [][]byte
		d              time.Duration
		tokenized      int
	}
	paths := []*path{{name: "direct", url: v.url() + "/chat/completions", bodies: direct}}
	for _, mode := range []string{upstream.ModeToken, upstream.ModeChat} {
		e, _ := upstreamEnv(b, v, mode)
		cl := e.claim(b, store.ModeTrain)
		paths = append(paths, &path{name: mode, url: base(e.srv, cl) + "/v1/chat/completions", key: cl.Key, bodies: bodies})
	}
	hc := benchClient()
	conversation := func(p *path) {
		n := len(v.recorded())
		v.push(replies...)
		t0 := time.Now()
		for k, body := range p.bodies {
			req, _ := http.NewRequest("POST", p.url, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if p.key != "" {
				req.Header.Set("Authorization", "Bearer "+p.key)
			}
			resp, err := hc.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			out, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				b.Fatalf("%s call %d: %d %v %.300s", p.name, k, resp.StatusCode, err, out)
			}
		}
		p.d += time.Since(t0)
		for _, c := range v.recorded()[n:] {
			p.tokenized += c.tokenized
		}
	}
	for _, p := range paths { // warm up
		conversation(p)
		p.d, p.tokenized = 0, 0
	}
	b.ResetTimer()
	for range b.N {
		for _, p := range paths {
			conversation(p)
		}
	}
	b.StopTimer()
	calls := float64(b.N * len(bodies))
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / calls }
	for _, p := range paths {
		b.ReportMetric(ms(p.d), p.name+"-ms/call")
		if p != paths[0] {
			b.ReportMetric(ms(p.d)-ms(paths[0].d), p.name+"-added-ms/call")
		}
	}
	// In token mode vLLM tokenizes nothing; agl renders only new messages
	// (TestTokenModeDrift logs that count).
	b.ReportMetric(float64(paths[2].tokenized)/calls, "chat-vllm-tokenized/call")
	b.ReportMetric(float64(paths[1].tokenized)/calls, "token-vllm-tokenized/call")
}

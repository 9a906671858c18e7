package proxy_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
)

// TestAttemptLimits: the call past an attempt's cap on calls or generated
// tokens is refused with a 400 in the route's error shape before the
// engine runs; the calls before it are recorded; another attempt has its
// own budget.
func TestAttemptLimits(t *testing.T) {
	chatBody := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	msgBody := `{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name      string
		limits    proxy.AttemptLimits
		route     string
		body      string
		allowed   int // calls answered before the refusal
		code      string
		anthropic bool
	}{
		{"calls chat", proxy.AttemptLimits{MaxCalls: 2}, "/v1/chat/completions", chatBody, 2, "attempt_call_limit", false},
		{"calls messages", proxy.AttemptLimits{MaxCalls: 1}, "/v1/messages", msgBody, 1, "attempt_call_limit", true},
		// each reply is "hello" + <|im_end|>: more than 3 tokens, so the
		// first call crosses the cap and the second is refused
		{"tokens chat", proxy.AttemptLimits{MaxResponseTokens: 3}, "/v1/chat/completions", chatBody, 1, "attempt_token_limit", false},
		{"tokens responses", proxy.AttemptLimits{MaxResponseTokens: 3}, "/v1/responses", `{"model":"m","input":"hi"}`, 1, "attempt_token_limit", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, proxy.Config{AttemptLimits: tc.limits}, nil)
			c := e.claim(t, store.ModeTrain)
			for range tc.allowed + 1 {
				e.eng.Push(text("hello"))
			}
			hdr := bearer(c.Key)
			for i := range tc.allowed {
				if code, _, body := post(t, http.MethodPost, base(e.srv, c)+tc.route, hdr, tc.body); code != 200 {
					t.Fatalf("call %d: %d %s", i+1, code, body)
				}
			}
			code, _, body := post(t, http.MethodPost, base(e.srv, c)+tc.route, hdr, tc.body)
			if code != http.StatusBadRequest {
				t.Fatalf("call past the cap: %d %s", code, body)
			}
			var er struct {
				Type  string `json:"type"`
				Error struct {
					Type, Code, Message string
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(body), &er); err != nil {
				t.Fatalf("error body %q: %v", body, err)
			}
			if tc.anthropic {
				if er.Type != "error" || er.Error.Type != "invalid_request_error" {
					t.Errorf("anthropic error shape: %s", body)
				}
			} else if er.Error.Code != tc.code {
				t.Errorf("code %q, want %q: %s", er.Error.Code, tc.code, body)
			}
			if !strings.Contains(er.Error.Message, "attempt_limits") {
				t.Errorf("message does not name the setting: %s", body)
			}
			if n := len(e.calls(t, c)); n != tc.allowed {
				t.Errorf("%d calls recorded, want %d", n, tc.allowed)
			}
			if left := e.eng.Left(); left != 1 {
				t.Errorf("the engine ran for the refused call (%d scripted replies left)", left)
			}
			// another attempt starts with its own budget
			c2 := e.claim(t, store.ModeTrain)
			if code, _, body := post(t, http.MethodPost, base(e.srv, c2)+tc.route, bearer(c2.Key), tc.body); code != 200 {
				t.Fatalf("other attempt: %d %s", code, body)
			}
		})
	}
}

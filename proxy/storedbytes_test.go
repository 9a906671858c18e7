package proxy_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
)

// TestStoredBytesBounded: a call whose stored form passes
// StoredCallBytes (70 KiB of random metadata here, 30 MiB in the attack)
// is refused 413 in its route's error shape and not recorded, and the
// attempt goes on; a conversation of lhTurns calls whose last is about
// 180 KB stores normally under a call bound of 32 KiB (calls are measured
// on the compact stored form); an attempt past StoredAttemptBytes is
// refused.
func TestStoredBytesBounded(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	word := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = "abcdefghijklmnopqrstuvwxyz "[rng.IntN(27)]
		}
		return string(b)
	}
	metadata := func(n int) string { return fmt.Sprintf(`,"metadata":{"junk":%q}`, word(n)) }
	for _, tc := range []struct {
		name, route string
		anthropic   bool
	}{
		{"chat completions", "/v1/chat/completions", false},
		{"messages", "/v1/messages", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := proxy.Config{StoredCallBytes: 32 << 10, StoredAttemptBytes: 1 << 20}
			e := newEnv(t, cfg, nil)
			e.eng.Context = 1 << 21
			c := e.claim(t, store.ModeTrain)
			hdr := bearer(c.Key)
			if tc.anthropic {
				hdr = map[string]string{"x-api-key": c.Key}
			}
			var msgs []map[string]string
			body := func(extra string) string {
				m, _ := json.Marshal(msgs)
				return `{"model":"m","max_tokens":16,"messages":` + string(m) + extra + `}`
			}
			refused := func(t *testing.T, extra, code string) {
				t.Helper()
				e.eng.Push(text("hello"))
				status, _, b := post(t, http.MethodPost, base(e.srv, c)+tc.route, hdr, body(extra))
				if status != http.StatusRequestEntityTooLarge {
					t.Fatalf("want 413, got %d %.300s", status, b)
				}
				var er struct {
					Type  string
					Error struct{ Type, Code, Message string }
				}
				if err := json.Unmarshal([]byte(b), &er); err != nil {
					t.Fatalf("error body %.300q: %v", b, err)
				}
				if tc.anthropic && (er.Type != "error" || er.Error.Type != "request_too_large") {
					t.Errorf("not Anthropic's error shape: %s", b)
				}
				if !tc.anthropic && er.Error.Code != code {
					t.Errorf("code %q, want %q: %s", er.Error.Code, code, b)
				}
				if !strings.Contains(er.Error.Message, "gateway.max_stored_") {
					t.Errorf("message does not name the setting: %s", b)
				}
				e.eng.Script()
			}
			var last int
			for i := range lhTurns {
				msgs = append(msgs, map[string]string{"role": "user", "content": word(7400)})
				if i == 10 {
					refused(t, metadata(70<<10), "call_too_large")
					refused(t, `,"temperature":0.5`+metadata(100<<10), "call_too_large")
				}
				e.eng.Push(text("hello"))
				b := body("")
				status, _, out := post(t, http.MethodPost, base(e.srv, c)+tc.route, hdr, b)
				if status != 200 {
					t.Fatalf("call %d (%d bytes): %d %.300s", i+1, len(b), status, out)
				}
				last = len(b)
				msgs = append(msgs, map[string]string{"role": "assistant", "content": "hello"})
			}
			if last < lhTurns*7400 {
				t.Fatalf("the last call is %d bytes, want about %d", last, lhTurns*7500)
			}
			calls := e.calls(t, c)
			if len(calls) != lhTurns {
				t.Fatalf("%d calls recorded, want %d (the refused ones not recorded)", len(calls), lhTurns)
			}
			if got := len(calls[lhTurns-1].Request); got != last {
				t.Errorf("the last call stored a request of %d bytes, sent %d", got, last)
			}
			// Calls of 24 KiB of random metadata each (about 15 KB stored)
			// pass the call bound but not, in time, the attempt's.
			msgs = msgs[:1]
			for i := 0; ; i++ {
				e.eng.Push(text("hello"))
				status, _, out := post(t, http.MethodPost, base(e.srv, c)+tc.route, hdr, body(metadata(24<<10)))
				if status == http.StatusRequestEntityTooLarge {
					t.Logf("attempt bound reached after %d calls of 24 KiB of metadata", i)
					if i < 5 {
						t.Fatalf("refused after %d calls of 24 KiB: %s", i, out)
					}
					if !strings.Contains(out, "max_stored_attempt_bytes") {
						t.Errorf("refusal does not name the attempt bound: %s", out)
					}
					break
				}
				if status != 200 {
					t.Fatalf("metadata call %d: %d %.300s", i, status, out)
				}
				if i > 300 {
					t.Fatalf("%d calls of 24 KiB stored, past the attempt's 1 MiB", i)
				}
			}
		})
	}
}

// TestStoredAttemptBytesAcrossRestart: the count of an attempt's stored
// bytes (StoredAttemptBytes) starts from what the store holds, so a
// gateway restarted in the middle of an attempt refuses the call that
// would pass the bound, as the first process would have.
func TestStoredAttemptBytesAcrossRestart(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	junk := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = "abcdefghijklmnopqrstuvwxyz "[rng.IntN(27)]
		}
		return string(b)
	}
	cfg := proxy.Config{StoredCallBytes: 64 << 10, StoredAttemptBytes: 256 << 10}
	e := newEnv(t, cfg, nil)
	c := e.claim(t, store.ModeTrain)
	call := func(srv *httptest.Server) (int, string) {
		e.eng.Push(text("hello"))
		status, _, out := post(t, http.MethodPost, base(srv, c)+"/v1/chat/completions", bearer(c.Key),
			fmt.Sprintf(`{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"metadata":{"junk":%q}}`, junk(24<<10)))
		return status, out
	}
	// Eight calls of 24 KiB of random metadata (about 15 KB stored each):
	// under the bound of 256 KiB, about half of it.
	for i := range 8 {
		if status, out := call(e.srv); status != http.StatusOK {
			t.Fatalf("call %d: %d %.300s", i, status, out)
		}
	}
	held, err := e.st.StoredEventBytes(testCtx(t), c.Rollout.ID, c.Attempt.ID, store.EventModelRequest)
	if err != nil {
		t.Fatal(err)
	}
	// The gateway restarts: a new proxy over the same store.
	srv := httptest.NewServer(proxy.New(cfg, e.st, proxy.NewTokenBackend(e.eng, e.tmpl, e.tmpl.Tokenizer(), 0)))
	defer srv.Close()
	n := 0
	for ; ; n++ {
		status, out := call(srv)
		if status == http.StatusRequestEntityTooLarge {
			if !strings.Contains(out, "attempt_too_large") {
				t.Errorf("refused, but not for the attempt's bytes: %s", out)
			}
			break
		}
		if status != http.StatusOK {
			t.Fatalf("call %d after the restart: %d %.300s", n, status, out)
		}
		if n > 20 {
			t.Fatalf("%d calls after the restart, with %d bytes stored before it: the count restarted from 0", n, held)
		}
	}
	after, err := e.st.StoredEventBytes(testCtx(t), c.Rollout.ID, c.Attempt.ID, store.EventModelRequest)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d bytes stored before the restart, %d calls after it, %d bytes stored in all (bound %d)", held, n, after, cfg.StoredAttemptBytes)
	if after > cfg.StoredAttemptBytes {
		t.Errorf("the attempt stored %d bytes, past its bound of %d", after, cfg.StoredAttemptBytes)
	}
}

// lhTurns is the conversation's length: the token backend's test engine
// re-renders and tokenizes each whole prompt, so a 100-call, 750 KB
// conversation takes minutes here (BenchmarkLongHorizon stores those).
const lhTurns = 24

package proxy_test

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
)

// TestErrorRecords: every call refused or failed after its key was
// authenticated leaves one model_request record with status error, the
// HTTP status and error body the caller got, and no ids; a call with a
// wrong key leaves nothing.
func TestErrorRecords(t *testing.T) {
	const chatOK = `{"model":"m","messages":[{"role":"user","content":"Hi"}]}`
	// Unknown fields are stored verbatim: random ones count in full.
	rng := rand.New(rand.NewPCG(1, 2))
	junk := make([]byte, 6000)
	for i := range junk {
		junk[i] = byte('a' + rng.IntN(26))
	}
	big := `{"model":"m","metadata":{"junk":"` + string(junk) + `"},"messages":[{"role":"user","content":"Hi"}]}`
	for _, tc := range []struct {
		name   string
		cfg    proxy.Config
		failUp bool // the upstream answers 500 to every call
		bodies []string
		status []int
		// want is the error records' statuses and code.
		want []int
		code string
	}{
		{"upstream 5xx", proxy.Config{}, true, []string{chatOK}, []int{502}, []int{502}, "backend_error"},
		{"bad body", proxy.Config{}, false, []string{`{"model":`}, []int{400}, []int{400}, "malformed JSON"},
		{"bad field", proxy.Config{}, false, []string{`{"model":"m","messages":[]}`}, []int{400}, []int{400}, "at least one message"},
		{"stored bytes", proxy.Config{StoredCallBytes: 4000}, false, []string{big}, []int{413}, []int{413}, "call_too_large"},
		{"attempt limit", proxy.Config{AttemptLimits: proxy.AttemptLimits{MaxCalls: 1}}, false, []string{chatOK, chatOK}, []int{200, 400}, []int{400}, "attempt_call_limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e *env
			if tc.failUp {
				v := newFakeVLLM(t, false)
				v.fail.Store(1 << 20)
				e = newEnv(t, tc.cfg, upstreamBackend(t, v.srv.URL))
			} else {
				e = newEnv(t, tc.cfg, nil)
				e.eng.Push(chat.Message{Role: chat.RoleAssistant, Content: "Hello."})
			}
			cl := e.claim(t, store.ModeTrain)
			url := base(e.srv, cl) + "/v1/chat/completions"
			// A wrong key is refused and records nothing.
			if st, _, _ := post(t, "POST", url, map[string]string{"Authorization": "Bearer nope"}, chatOK); st != 401 {
				t.Fatalf("wrong key: %d", st)
			}
			var answers []string
			for i, b := range tc.bodies {
				st, _, body := post(t, "POST", url, map[string]string{"Authorization": "Bearer " + cl.Key}, b)
				if st != tc.status[i] {
					t.Fatalf("call %d: %d %s", i, st, body)
				}
				if st != 200 {
					answers = append(answers, body)
				}
			}
			for _, mc := range e.calls(t, cl) {
				if mc.HTTPStatus != 0 || mc.Error != "" {
					t.Errorf("answered call with error fields: %+v", mc)
				}
			}
			errs := e.errorCalls(t, cl)
			if len(errs) != len(tc.want) {
				t.Fatalf("%d error records, want %d", len(errs), len(tc.want))
			}
			for i, mc := range errs {
				if mc.HTTPStatus != tc.want[i] || mc.Error != answers[i] || !strings.Contains(mc.Error, tc.code) {
					t.Errorf("record %d: http_status %d error %q; want %d and the answer %q", i, mc.HTTPStatus, mc.Error, tc.want[i], answers[i])
				}
				if mc.API != api.ShapeChatCompletions || mc.CallID == "" || len(mc.PromptIDs)+len(mc.ResponseIDs) != 0 || len(mc.Request)+len(mc.Response) != 0 {
					t.Errorf("record %d: %+v", i, mc)
				}
			}
		})
	}
}

// TestErrorRecordsBounded: an error record keeps at most
// api.MaxCallErrorBytes of the error body, cut at a rune, and error
// records count against the attempt's stored bytes like any event: a
// harness sending refused calls in a loop cannot store without bound.
func TestErrorRecordsBounded(t *testing.T) {
	t.Run("error body", func(t *testing.T) {
		long := strings.Repeat("é", 8000) // 16000 bytes, two per rune
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(400)
			w.Write([]byte(`{"error":{"message":"x` + long + `","type":"BadRequestError"}}`))
		}))
		t.Cleanup(up.Close)
		e := newEnv(t, proxy.Config{}, upstreamBackend(t, up.URL))
		cl := e.claim(t, store.ModeTrain)
		st, _, body := post(t, "POST", base(e.srv, cl)+"/v1/chat/completions", bearer(cl.Key), `{"model":"m","messages":[{"role":"user","content":"Hi"}]}`)
		if st != 400 || len(body) < 16000 {
			t.Fatalf("%d, %d bytes", st, len(body))
		}
		errs := e.errorCalls(t, cl)
		if len(errs) != 1 {
			t.Fatalf("%d error records", len(errs))
		}
		got := errs[0].Error
		if len(got) > api.MaxCallErrorBytes || len(got) < api.MaxCallErrorBytes-1 || !utf8.ValidString(got) || !strings.HasPrefix(body, got) {
			t.Errorf("error body of %d bytes (valid UTF-8 %v), want the answer's first %d", len(got), utf8.ValidString(got), api.MaxCallErrorBytes)
		}
	})
	t.Run("attempt bytes", func(t *testing.T) {
		e := newEnv(t, proxy.Config{StoredAttemptBytes: 4 << 10}, nil)
		cl := e.claim(t, store.ModeTrain)
		for range 100 {
			if st, _, body := post(t, "POST", base(e.srv, cl)+"/v1/chat/completions", bearer(cl.Key), `{"model":`); st != 400 {
				t.Fatalf("%d %s", st, body)
			}
		}
		evs, err := e.st.ListEvents(testCtx(t), store.EventFilter{RolloutID: cl.Rollout.ID})
		if err != nil {
			t.Fatal(err)
		}
		// Each record's stored form is a few hundred bytes: the bound lets
		// some tens in, not a hundred.
		if len(evs) < 5 || len(evs) > 40 {
			t.Errorf("%d error records stored for 100 refusals, want the 4 KiB bound to stop them after a few", len(evs))
		}
	})
}

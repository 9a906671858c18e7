package proxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/sqlite"
)

// env is a gateway on loopback over a real SQLite store.
type env struct {
	st   *sqlite.Store
	p    *proxy.Proxy
	srv  *httptest.Server
	eng  *testutil.ScriptEngine
	tmpl *chat.ChatML
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newEnv starts a gateway with a token backend (b nil) or the given backend.
func newEnv(t testing.TB, cfg proxy.Config, b proxy.Backend) *env {
	tmpl, err := chat.NewSmall()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{st: testutil.SQLite(t), tmpl: tmpl, eng: &testutil.ScriptEngine{Tmpl: tmpl, ModelVersion: 3}}
	if b == nil {
		b = proxy.NewTokenBackend(e.eng, tmpl, tmpl.Tokenizer(), 0)
	}
	e.p = proxy.New(cfg, e.st, b)
	e.srv = httptest.NewServer(e.p)
	t.Cleanup(e.srv.Close)
	return e
}

// claim creates a rollout of the given mode and starts an attempt.
func (e *env) claim(t testing.TB, mode store.Mode) store.Claim {
	ctx := testCtx(t)
	if _, err := e.st.CreateRollouts(ctx, []store.NewRollout{{Task: json.RawMessage(`{"q":1}`), Mode: mode}}); err != nil {
		t.Fatal(err)
	}
	c, err := e.st.Claim(ctx, store.ClaimRequest{WorkerID: "test", Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func base(srv *httptest.Server, c store.Claim) string {
	return srv.URL + "/r/" + c.Rollout.ID + "/" + c.Attempt.ID
}

// calls returns the attempt's model_request events of answered calls
// (records of refused and failed calls are left out: see errorCalls).
func (e *env) calls(t testing.TB, c store.Claim) []api.ModelCall {
	all := e.allCalls(t, c)
	return slices.DeleteFunc(all, func(mc api.ModelCall) bool { return mc.Status == api.CallError })
}

// errorCalls returns the attempt's records of refused and failed calls.
func (e *env) errorCalls(t testing.TB, c store.Claim) []api.ModelCall {
	all := e.allCalls(t, c)
	return slices.DeleteFunc(all, func(mc api.ModelCall) bool { return mc.Status != api.CallError })
}

// allCalls returns the attempt's model_request events.
func (e *env) allCalls(t testing.TB, c store.Claim) []api.ModelCall {
	evs, err := e.st.ListEvents(testCtx(t), store.EventFilter{RolloutID: c.Rollout.ID, AttemptID: c.Attempt.ID, Types: []string{store.EventModelRequest}})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]api.ModelCall, len(evs))
	for i, ev := range evs {
		if err := json.Unmarshal(ev.Data, &out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// checkChain asserts the no-drift property: every call after the first
// continues the token state, its prompt starting with exactly the previous
// call's prompt + response ids; and that the engine saw exactly the
// recorded ids.
func (e *env) checkChain(t testing.TB, calls []api.ModelCall, shape string) {
	t.Helper()
	if len(calls) == 0 {
		t.Fatal("no model_request events recorded")
	}
	prompts, outputs := e.eng.Calls()
	if len(prompts) != len(calls) {
		t.Fatalf("engine saw %d calls, %d recorded", len(prompts), len(calls))
	}
	for k, c := range calls {
		if c.API != shape {
			t.Errorf("call %d: api %q, want %q", k, c.API, shape)
		}
		if c.Model != "agl-test" || c.ModelVersion != 3 {
			t.Errorf("call %d: model %q v%d, want agl-test v3", k, c.Model, c.ModelVersion)
		}
		if !slices.Equal(c.PromptIDs, prompts[k]) || !slices.Equal(c.ResponseIDs, outputs[k]) {
			t.Errorf("call %d: recorded ids differ from what the engine consumed/produced", k)
		}
		if len(c.ResponseLogprobs) != len(c.ResponseIDs) {
			t.Errorf("call %d: %d logprobs for %d ids", k, len(c.ResponseLogprobs), len(c.ResponseIDs))
		}
		if c.Usage.PromptTokens != len(c.PromptIDs) || c.Usage.CompletionTokens != len(c.ResponseIDs) {
			t.Errorf("call %d: usage %+v for %d/%d ids", k, c.Usage, len(c.PromptIDs), len(c.ResponseIDs))
		}
		if len(c.Request) == 0 || len(c.Response) == 0 || c.CallID == "" {
			t.Errorf("call %d: request/response/call id not recorded", k)
		}
		if k == 0 {
			if c.Continued || c.RenderReason != proxy.ReasonFirstCall {
				t.Errorf("call 0: continued=%v reason=%q, want a first_call render", c.Continued, c.RenderReason)
			}
			continue
		}
		prev := append(slices.Clone(calls[k-1].PromptIDs), calls[k-1].ResponseIDs...)
		if !c.Continued {
			t.Errorf("call %d: not continued (reason %q)", k, c.RenderReason)
		}
		if len(c.PromptIDs) <= len(prev) || !slices.Equal(c.PromptIDs[:len(prev)], prev) {
			t.Errorf("call %d: prompt does not start with call %d's prompt+response ids (drift)", k, k-1)
		}
	}
}

func mustJSON(t testing.TB, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func toolCall(name, args string) chat.Message {
	return chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{Name: name, Arguments: args}}}
}

func text(s string) chat.Message { return chat.Message{Role: chat.RoleAssistant, Content: s} }

var _ = fmt.Sprintf

func asErr[T error](err error, target *T) bool { return errors.As(err, target) }

// post sends a raw request and returns status, headers and body.
func post(t testing.TB, method, url string, hdr map[string]string, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

func bearer(key string) map[string]string { return map[string]string{"Authorization": "Bearer " + key} }

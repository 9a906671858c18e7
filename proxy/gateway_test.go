package proxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

const goodChat = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
const goodMessages = `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`

// TestBadInput: every bad request gets the API-shaped error of its route,
// and nothing already stored is lost.
func TestBadInput(t *testing.T) {
	e := newEnv(t, proxy.Config{MaxBodyBytes: 4096}, nil)
	cl := e.claim(t, store.ModeTrain)
	other := e.claim(t, store.ModeTrain)
	done := e.claim(t, store.ModeTrain)
	if _, err := e.st.CompleteAttempt(testCtx(t), done.Rollout.ID, done.Attempt.ID, store.AttemptSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	// One good call first: it must survive everything below.
	e.eng.Push(text("hello"))
	if st, _, body := post(t, "POST", base(e.srv, cl)+"/v1/chat/completions", bearer(cl.Key), goodChat); st != 200 {
		t.Fatalf("good call: %d %s", st, body)
	}
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`
	bigMsg := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`
	chatURL, msgURL, rsURL := base(e.srv, cl)+"/v1/chat/completions", base(e.srv, cl)+"/v1/messages", base(e.srv, cl)+"/v1/responses"
	ak := map[string]string{"x-api-key": cl.Key, "anthropic-version": "2023-06-01"}
	cases := []struct {
		name      string
		url       string
		hdr       map[string]string
		body      string
		paused    bool
		status    int
		anthropic bool
		errType   string
		param     string
	}{
		{"chat malformed JSON", chatURL, bearer(cl.Key), `{"model":`, false, 400, false, "invalid_request_error", ""},
		{"chat wrong role", chatURL, bearer(cl.Key), `{"model":"m","messages":[{"role":"wizard","content":"hi"}]}`, false, 400, false, "invalid_request_error", "messages[0].role"},
		{"chat no messages", chatURL, bearer(cl.Key), `{"model":"m","messages":[]}`, false, 400, false, "invalid_request_error", "messages"},
		{"chat content wrong type", chatURL, bearer(cl.Key), `{"model":"m","messages":[{"role":"user","content":5}]}`, false, 400, false, "invalid_request_error", "messages[0].content"},
		{"chat tool result unknown id", chatURL, bearer(cl.Key), `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_9","content":"r"}]}`, false, 400, false, "invalid_request_error", "messages[2]"},
		{"chat image part", chatURL, bearer(cl.Key), `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, false, 400, false, "invalid_request_error", "messages[0].content[0].type"},
		{"chat n=2", chatURL, bearer(cl.Key), `{"model":"m","n":2,"messages":[{"role":"user","content":"hi"}]}`, false, 400, false, "invalid_request_error", "n"},
		{"chat logit_bias", chatURL, bearer(cl.Key), `{"model":"m","logit_bias":{"5":10},"messages":[{"role":"user","content":"hi"}]}`, false, 400, false, "invalid_request_error", "logit_bias"},
		{"chat presence_penalty", chatURL, bearer(cl.Key), `{"model":"m","presence_penalty":0.5,"messages":[{"role":"user","content":"hi"}]}`, false, 400, false, "invalid_request_error", "presence_penalty"},
		{"chat json_schema", chatURL, bearer(cl.Key), `{"model":"m","response_format":{"type":"json_schema"},"messages":[{"role":"user","content":"hi"}]}`, false, 400, false, "invalid_request_error", "response_format"},
		{"chat forced tool", chatURL, bearer(cl.Key), `{"model":"m","tool_choice":"required","messages":[{"role":"user","content":"hi"}]}`, false, 400, false, "invalid_request_error", "tool_choice"},
		{"chat stop strings on token engine", chatURL, bearer(cl.Key), `{"model":"m","stop":"x","messages":[{"role":"user","content":"hi"}]}`, false, 400, false, "invalid_request_error", ""},
		{"chat oversized", chatURL, bearer(cl.Key), big, false, 413, false, "invalid_request_error", ""},
		{"chat wrong key", chatURL, bearer("agl-wrong"), goodChat, false, 401, false, "authentication_error", ""},
		{"chat no key", chatURL, nil, goodChat, false, 401, false, "authentication_error", ""},
		{"chat other attempt's key", chatURL, bearer(other.Key), goodChat, false, 401, false, "authentication_error", ""},
		{"chat finished attempt", base(e.srv, done) + "/v1/chat/completions", bearer(done.Key), goodChat, false, 409, false, "conflict_error", ""},
		{"chat paused", chatURL, bearer(cl.Key), goodChat, true, 503, false, "service_unavailable_error", ""},
		{"chat GET", chatURL, bearer(cl.Key), "", false, 405, false, "invalid_request_error", ""},
		{"unknown route", base(e.srv, cl) + "/v1/embeddings", bearer(cl.Key), goodChat, false, 404, false, "not_found_error", ""},
		{"responses previous_response_id", rsURL, bearer(cl.Key), `{"model":"m","input":"hi","previous_response_id":"resp_1"}`, false, 400, false, "invalid_request_error", "previous_response_id"},
		{"responses unknown call output", rsURL, bearer(cl.Key), `{"model":"m","input":[{"role":"user","content":"hi"},{"type":"function_call_output","call_id":"call_x","output":"r"}]}`, false, 400, false, "invalid_request_error", "input[1]"},
		{"responses wrong role", rsURL, bearer(cl.Key), `{"model":"m","input":[{"role":"tool","content":"hi"}]}`, false, 400, false, "invalid_request_error", "input[0].role"},
		{"messages malformed JSON", msgURL, ak, `{"model":`, false, 400, true, "invalid_request_error", ""},
		{"messages developer role", msgURL, ak, `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"},{"role":"developer","content":"hi"}]}`, false, 400, true, "invalid_request_error", ""},
		{"messages no max_tokens", msgURL, ak, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, false, 400, true, "invalid_request_error", ""},
		{"messages tool result unknown id", msgURL, ak, `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":"r"}]}]}`, false, 400, true, "invalid_request_error", ""},
		{"messages prefill", msgURL, ak, `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Sure, "}]}`, false, 400, true, "invalid_request_error", ""},
		{"messages image", msgURL, ak, `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`, false, 400, true, "invalid_request_error", ""},
		{"messages oversized", msgURL, ak, bigMsg, false, 413, true, "request_too_large", ""},
		{"messages wrong key", msgURL, map[string]string{"x-api-key": "nope"}, goodMessages, false, 401, true, "authentication_error", ""},
		{"messages paused", msgURL, ak, goodMessages, true, 503, true, "overloaded_error", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.paused {
				e.p.Pause()
				defer e.p.Resume()
			}
			method := "POST"
			if strings.HasSuffix(c.name, "GET") {
				method = "GET"
			}
			st, hdr, body := post(t, method, c.url, c.hdr, c.body)
			if st != c.status {
				t.Fatalf("status %d, want %d: %s", st, c.status, body)
			}
			if c.paused && hdr.Get("Retry-After") == "" {
				t.Error("no Retry-After while paused")
			}
			if c.anthropic {
				var b struct {
					Type  string `json:"type"`
					Error struct {
						Type    string `json:"type"`
						Message string `json:"message"`
					} `json:"error"`
				}
				if err := json.Unmarshal([]byte(body), &b); err != nil || b.Type != "error" || b.Error.Type != c.errType || b.Error.Message == "" {
					t.Fatalf("not an Anthropic %s error: %s", c.errType, body)
				}
				return
			}
			var b struct {
				Error *struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(body), &b); err != nil || b.Error == nil || b.Error.Type != c.errType || b.Error.Message == "" {
				t.Fatalf("not an OpenAI %s error: %s", c.errType, body)
			}
			if c.param != "" && (b.Error.Param == nil || *b.Error.Param != c.param) {
				t.Errorf("param %v, want %q: %s", b.Error.Param, c.param, body)
			}
			if !strings.Contains(body, `"param":`) || !strings.Contains(body, `"code":`) {
				t.Errorf("OpenAI error lacks param/code fields: %s", body)
			}
		})
	}
	if calls := e.calls(t, cl); len(calls) != 1 {
		t.Fatalf("%d events after bad input, want the 1 good call", len(calls))
	}
}

// TestPauseDrain: paused → new calls get 503 + Retry-After, in-flight calls
// finish and are recorded, Drain waits for them; Resume serves again.
func TestPauseDrain(t *testing.T) {
	e := newEnv(t, proxy.Config{RetryAfter: 2 * time.Second}, nil)
	e.eng.Gate = make(chan struct{})
	e.eng.Started = make(chan struct{}, 4)
	cl := e.claim(t, store.ModeTrain)
	url := base(e.srv, cl) + "/v1/chat/completions"
	e.eng.Push(text("first"), text("second"))
	type res struct {
		st   int
		body string
	}
	inflight := make(chan res, 1)
	go func() {
		st, _, body := post(t, "POST", url, bearer(cl.Key), goodChat)
		inflight <- res{st, body}
	}()
	<-e.eng.Started
	e.p.Pause()
	if paused, n := e.p.Status(); !paused || n != 1 {
		t.Fatalf("status paused=%v inflight=%d", paused, n)
	}
	st, hdr, body := post(t, "POST", url, bearer(cl.Key), goodChat)
	if st != 503 || hdr.Get("Retry-After") != "2" {
		t.Fatalf("paused call: %d retry-after %q: %s", st, hdr.Get("Retry-After"), body)
	}
	short, cancel := context.WithTimeout(testCtx(t), 20*time.Millisecond)
	defer cancel()
	if err := e.p.Drain(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain with a call in flight: %v", err)
	}
	drained := make(chan error, 1)
	go func() { drained <- e.p.Drain(testCtx(t)) }()
	e.eng.Gate <- struct{}{}
	if r := <-inflight; r.st != 200 || !strings.Contains(r.body, "first") {
		t.Fatalf("in-flight call: %d %s", r.st, r.body)
	}
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	if n := len(e.calls(t, cl)); n != 1 {
		t.Fatalf("%d events, want the in-flight call's", n)
	}
	e.p.Resume()
	go func() { e.eng.Gate <- struct{}{} }()
	if st, _, body := post(t, "POST", url, bearer(cl.Key), goodChat); st != 200 || !strings.Contains(body, "second") {
		t.Fatalf("after resume: %d %s", st, body)
	}
}

// TestHarnessEvents: the harness posts rewards and custom events with its
// scoped key.
func TestHarnessEvents(t *testing.T) {
	e := newEnv(t, proxy.Config{}, nil)
	cl := e.claim(t, store.ModeTrain)
	url := base(e.srv, cl) + "/events"
	for _, c := range []struct {
		name, body string
		key        string
		status     int
	}{
		{"reward", `{"type":"reward","data":{"value":0.5}}`, cl.Key, 200},
		{"bare number reward", `{"type":"reward","data":1}`, cl.Key, 200},
		{"array", `[{"type":"log","data":{"msg":"a"}},{"type":"my_metric","data":3}]`, cl.Key, 200},
		{"wrapped", `{"events":[{"type":"log","data":"b"}]}`, cl.Key, 200},
		{"bad reward", `{"type":"reward","data":{"values":{"a":1,"b":2}}}`, cl.Key, 400},
		{"forged model_request", `{"type":"model_request","data":{}}`, cl.Key, 403},
		{"forged span", `[{"type":"log","data":1},{"type":"span","data":{}}]`, cl.Key, 403},
		{"forged reward source", `{"type":"reward","data":{"value":1,"source":"evaluator"}}`, cl.Key, 403},
		{"overflowing reward", `{"type":"reward","data":{"value":1.7e308}}`, cl.Key, 400},
		{"reward out of bound", `{"type":"reward","data":1000001}`, cl.Key, 400},
		{"boolean reward", `{"type":"reward","data":{"value":true}}`, cl.Key, 400},
		{"string reward", `{"type":"reward","data":{"value":"1"}}`, cl.Key, 400},
		{"null reward", `{"type":"reward","data":null}`, cl.Key, 400},
		{"no type", `{"data":1}`, cl.Key, 400},
		{"malformed", `{"type":`, cl.Key, 400},
		{"wrong key", `{"type":"log","data":1}`, "nope", 401},
	} {
		st, _, body := post(t, "POST", url, bearer(c.key), c.body)
		if st != c.status {
			t.Errorf("%s: %d %s", c.name, st, body)
		}
	}
	evs, err := e.st.ListEvents(testCtx(t), store.EventFilter{RolloutID: cl.Rollout.ID})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ev := range evs {
		types = append(types, ev.Type)
	}
	if !slices.Equal(types, []string{"reward", "reward", "log", "my_metric", "log"}) {
		t.Fatalf("stored %v", types)
	}
	r, err := store.ParseReward(evs[0].Data)
	if v, _ := r.PrimaryValue(); err != nil || v != 0.5 {
		t.Fatalf("reward %v %v", v, err)
	}
}

// chatTurn posts a raw chat request built from msgs and returns the
// assistant message.
func chatTurn(t *testing.T, url, key string, msgs []map[string]any, extra map[string]any) map[string]any {
	t.Helper()
	req := map[string]any{"model": "m", "messages": msgs}
	for k, v := range extra {
		req[k] = v
	}
	st, _, body := post(t, "POST", url, bearer(key), mustJSON(t, req))
	if st != 200 {
		t.Fatalf("%d %s", st, body)
	}
	var resp struct {
		Choices []struct {
			Message map[string]any `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatal(err)
	}
	return resp.Choices[0].Message
}

// TestTokenState: rewritten history, changed tools and a truncated reply
// re-render from scratch and say why; a restarted gateway continues from
// the stored calls.
func TestTokenState(t *testing.T) {
	e := newEnv(t, proxy.Config{}, nil)
	cl := e.claim(t, store.ModeTrain)
	url := base(e.srv, cl) + "/v1/chat/completions"
	tools := []map[string]any{{"type": "function", "function": map[string]any{"name": "ls", "parameters": map[string]any{"type": "object"}}}}
	e.eng.Push(toolCall("ls", `{}`), text("done"), text("again"), text("tools"), text("this reply is long"), text("after"))
	msgs := []map[string]any{{"role": "user", "content": "list"}}
	m := chatTurn(t, url, cl.Key, msgs, map[string]any{"tools": tools})
	if content, ok := m["content"]; !ok || content != nil {
		t.Fatalf("tool-call message content %v (present %v), want null", content, ok)
	}
	id := m["tool_calls"].([]any)[0].(map[string]any)["id"].(string)
	msgs = append(msgs, m, map[string]any{"role": "tool", "tool_call_id": id, "content": "a b"})
	chatTurn(t, url, cl.Key, msgs, map[string]any{"tools": tools}) // continued
	// History rewritten: the first user message edited.
	edited := slices.Clone(msgs)
	edited[0] = map[string]any{"role": "user", "content": "list all"}
	chatTurn(t, url, cl.Key, edited, map[string]any{"tools": tools})
	// Tools changed (the conversation itself extends call 1's).
	chatTurn(t, url, cl.Key, append(slices.Clone(msgs), map[string]any{"role": "assistant", "content": "done"}, map[string]any{"role": "user", "content": "next"}), nil)
	// A truncated reply (max_tokens) cannot be continued.
	short := []map[string]any{{"role": "user", "content": "talk"}}
	m = chatTurn(t, url, cl.Key, short, map[string]any{"max_tokens": 5})
	chatTurn(t, url, cl.Key, append(short, m, map[string]any{"role": "user", "content": "more"}), nil)

	calls := e.calls(t, cl)
	want := []struct {
		continued bool
		reason    string
	}{{false, proxy.ReasonFirstCall}, {true, ""}, {false, proxy.ReasonHistoryRewritten}, {false, proxy.ReasonToolsChanged}, {false, proxy.ReasonHistoryRewritten}, {false, proxy.ReasonHistoryRewritten}}
	if len(calls) != len(want) {
		t.Fatalf("%d calls", len(calls))
	}
	for i, w := range want {
		if calls[i].Continued != w.continued || calls[i].RenderReason != w.reason {
			t.Errorf("call %d: continued=%v reason=%q, want %v %q", i, calls[i].Continued, calls[i].RenderReason, w.continued, w.reason)
		}
	}
	if calls[4].FinishReason != "length" || len(calls[4].ResponseIDs) != 5 {
		t.Errorf("truncated call: %s, %d ids", calls[4].FinishReason, len(calls[4].ResponseIDs))
	}

	// A restarted gateway (or another replica) holds no token state: it
	// continues from the store's record of call 1, exactly as the first
	// process would have.
	tmpl := e.tmpl
	restart := func() {
		e.srv.Config.Handler = proxy.New(proxy.Config{}, e.st, proxy.NewTokenBackend(e.eng, tmpl, tmpl.Tokenizer(), 0))
	}
	restart()
	e.eng.Push(text("after restart"))
	full := append(slices.Clone(msgs), map[string]any{"role": "assistant", "content": "done"}, map[string]any{"role": "user", "content": "thanks"})
	chatTurn(t, url, cl.Key, full, map[string]any{"tools": tools})
	calls = e.calls(t, cl)
	last := calls[len(calls)-1]
	if !last.Continued || last.RenderReason != "" {
		t.Fatalf("after restart: continued=%v reason=%q, want continued from the stored call", last.Continued, last.RenderReason)
	}
	if stored := append(slices.Clone(calls[1].PromptIDs), calls[1].ResponseIDs...); !slices.Equal(last.PromptIDs[:len(stored)], stored) {
		t.Fatal("after restart: the prompt does not extend call 1's stored prompt+response ids")
	}
	// A reply no stored call produced (the harness wrote it) cannot be
	// continued: rendered from scratch, and the event says why.
	restart()
	e.eng.Push(text("fabricated"))
	chatTurn(t, url, cl.Key, []map[string]any{{"role": "user", "content": "list"}, {"role": "assistant", "content": "made up"}, {"role": "user", "content": "so?"}}, nil)
	calls = e.calls(t, cl)
	if l := calls[len(calls)-1]; l.Continued || l.RenderReason != proxy.ReasonNoTokenState {
		t.Fatalf("fabricated reply after restart: continued=%v reason=%q", l.Continued, l.RenderReason)
	}
	conv := chat.Conversation{Messages: []chat.Message{
		{Role: "user", Content: "list"},
		{Role: "assistant", ToolCalls: []chat.ToolCall{{ID: id, Name: "ls", Arguments: "{}"}}},
		{Role: "tool", Content: "a b", ToolCallID: id},
		{Role: "assistant", Content: "done"},
		{Role: "user", Content: "thanks"},
	}, Tools: []chat.Tool{{Name: "ls", Parameters: json.RawMessage(`{"type":"object"}`)}}}
	ids, err := tmpl.Render(conv, true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, last.PromptIDs) {
		t.Fatal("re-rendered prompt differs from the template's rendering")
	}
	// And the continued call 1 equals a fresh render of its conversation.
	if !slices.Equal(calls[1].PromptIDs, must(tmpl.Render(chat.Conversation{Messages: conv.Messages[:3], Tools: conv.Tools}, true))) {
		t.Fatal("continued prompt differs from a fresh render")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestModeOverridesAndModels: val-mode overrides apply and /v1/models
// lists the served name.
func TestModeOverridesAndModels(t *testing.T) {
	temp, topP := float32(0), float32(0.9)
	e := newEnv(t, proxy.Config{Val: proxy.ModeOverrides{Model: "agl-val", Temperature: &temp, TopP: &topP, MaxTokens: 64}}, nil)
	val := e.claim(t, store.ModeVal)
	train := e.claim(t, store.ModeTrain)
	client := openai.NewClient(option.WithBaseURL(base(e.srv, val)+"/v1"), option.WithAPIKey(val.Key), option.WithMaxRetries(0))
	page, err := client.Models.List(testCtx(t))
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != "agl-val" {
		t.Fatalf("val models %+v %v", page, err)
	}
	tc := openai.NewClient(option.WithBaseURL(base(e.srv, train)+"/v1"), option.WithAPIKey(train.Key), option.WithMaxRetries(0))
	if page, err := tc.Models.List(testCtx(t)); err != nil || page.Data[0].ID != "agl-test" {
		t.Fatalf("train models %+v %v", page, err)
	}
	e.eng.Push(text("ok"))
	if _, err := client.Chat.Completions.New(testCtx(t), openai.ChatCompletionNewParams{Model: "x", Temperature: openai.Float(1.5), MaxTokens: openai.Int(5), Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}); err != nil {
		t.Fatal(err)
	}
	c := e.calls(t, val)[0]
	var s struct {
		Temperature float32 `json:"temperature"`
		TopP        float32 `json:"top_p"`
		MaxTokens   int     `json:"max_tokens"`
	}
	var full struct {
		StopIDs []int32 `json:"stop_ids"`
	}
	if err := json.Unmarshal(c.Sampling, &s); err != nil || s.Temperature != 0 || s.TopP != 0.9 || s.MaxTokens != 64 {
		t.Fatalf("sampling %s", c.Sampling)
	}
	// The effective parameters are recorded: the template's stop ids too.
	if err := json.Unmarshal(c.Sampling, &full); err != nil || !slices.Equal(full.StopIDs, e.tmpl.StopIDs()) {
		t.Fatalf("sampling %s, want stop ids %v", c.Sampling, e.tmpl.StopIDs())
	}
}

// TestCompletions: /v1/completions with token-id and text prompts.
func TestCompletions(t *testing.T) {
	e := newEnv(t, proxy.Config{}, nil)
	cl := e.claim(t, store.ModeTrain)
	e.eng.Push(text("fox"), text("dog"))
	client := openai.NewClient(option.WithBaseURL(base(e.srv, cl)+"/v1"), option.WithAPIKey(cl.Key), option.WithMaxRetries(0))
	r, err := client.Completions.New(testCtx(t), openai.CompletionNewParams{Model: "m", Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{84, 104, 101}}, MaxTokens: openai.Int(20)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Choices[0].Text != "fox" || r.Choices[0].FinishReason != "stop" {
		t.Fatalf("%s", r.RawJSON())
	}
	s := client.Completions.NewStreaming(testCtx(t), openai.CompletionNewParams{Model: "m", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("The lazy")}, MaxTokens: openai.Int(20)})
	var got string
	for s.Next() {
		got += s.Current().Choices[0].Text
	}
	if err := s.Err(); err != nil || got != "dog" {
		t.Fatalf("streamed %q %v", got, err)
	}
	calls := e.calls(t, cl)
	if !slices.Equal(calls[0].PromptIDs, []int32{84, 104, 101}) || !slices.Equal(calls[1].PromptIDs, e.tmpl.Tokenizer().Encode("The lazy")) || calls[1].API != api.ShapeCompletions {
		t.Fatalf("prompts %v %v", calls[0].PromptIDs, calls[1].PromptIDs)
	}
}

// TestPythonHarness runs a Python 3 standard-library (urllib only) harness
// that knows nothing but OPENAI_BASE_URL and OPENAI_API_KEY.
func TestPythonHarness(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	e := newEnv(t, proxy.Config{}, nil)
	cl := e.claim(t, store.ModeTrain)
	e.eng.Push(toolCall("add", `{"a": 2, "b": 3}`), text("The sum is 5."), text("Streamed answer."))
	cmd := exec.CommandContext(testCtx(t), py, filepath.Join("testdata", "harness.py"))
	cmd.Env = []string{"OPENAI_BASE_URL=" + base(e.srv, cl) + "/v1", "OPENAI_API_KEY=" + cl.Key, "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("harness: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "final: The sum is 5.") || !strings.Contains(string(out), "stream: Streamed answer.") {
		t.Fatalf("harness output:\n%s", out)
	}
	calls := e.calls(t, cl)
	if len(calls) != 3 || !calls[1].Continued || !calls[2].Stream {
		t.Fatalf("%d calls", len(calls))
	}
	evs, err := e.st.ListEvents(testCtx(t), store.EventFilter{RolloutID: cl.Rollout.ID, Types: []string{store.EventReward}})
	if err != nil || len(evs) != 1 {
		t.Fatalf("reward events %v %v", evs, err)
	}
}

// TestConcurrentConversations: several conversations (sub-agents) of one
// attempt run in parallel; each keeps its own token state.
func TestConcurrentConversations(t *testing.T) {
	e := newEnv(t, proxy.Config{}, nil)
	cl := e.claim(t, store.ModeTrain)
	url := base(e.srv, cl) + "/v1/chat/completions"
	const n = 6
	for range 2 * n {
		e.eng.Push(text("ok"))
	}
	errs := make(chan error, n)
	for i := range n {
		go func() {
			msgs := []map[string]any{{"role": "user", "content": "task " + strings.Repeat("x", i)}}
			for turn := range 2 {
				st, _, body := post(t, "POST", url, bearer(cl.Key), mustJSON(t, map[string]any{"model": "m", "messages": msgs}))
				if st != 200 {
					errs <- errors.New(body)
					return
				}
				msgs = append(msgs, map[string]any{"role": "assistant", "content": "ok"}, map[string]any{"role": "user", "content": "turn " + strings.Repeat("y", turn)})
			}
			errs <- nil
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	calls := e.calls(t, cl)
	continued := 0
	for _, c := range calls {
		var req struct{ Messages []any }
		if err := json.Unmarshal(c.Request, &req); err != nil {
			t.Fatal(err)
		}
		if len(req.Messages) == 3 {
			if !c.Continued {
				t.Errorf("second turn not continued: %s", c.RenderReason)
			}
			continued++
		}
	}
	if continued != n || len(calls) != 2*n {
		t.Fatalf("%d calls, %d continued", len(calls), continued)
	}
}

// TestReasoning: a reply with reasoning is returned as reasoning_content
// (OpenAI) or a thinking block (Anthropic), and the next call continues the
// token state whether the harness sends the reasoning back or drops it.
func TestReasoning(t *testing.T) {
	e := newEnv(t, proxy.Config{}, nil)
	cl := e.claim(t, store.ModeTrain)
	url := base(e.srv, cl) + "/v1/chat/completions"
	think := chat.Message{Role: chat.RoleAssistant, Reasoning: "I should list files.", ToolCalls: []chat.ToolCall{{Name: "ls", Arguments: "{}"}}}
	e.eng.Push(think, text("done"))
	tools := []map[string]any{{"type": "function", "function": map[string]any{"name": "ls", "parameters": map[string]any{"type": "object"}}}}
	msgs := []map[string]any{{"role": "user", "content": "list"}}
	m := chatTurn(t, url, cl.Key, msgs, map[string]any{"tools": tools})
	if m["reasoning_content"] != "I should list files." {
		t.Fatalf("message %v", m)
	}
	delete(m, "reasoning_content") // harnesses usually drop it
	id := m["tool_calls"].([]any)[0].(map[string]any)["id"].(string)
	msgs = append(msgs, m, map[string]any{"role": "tool", "tool_call_id": id, "content": "a"})
	chatTurn(t, url, cl.Key, msgs, map[string]any{"tools": tools})
	calls := e.calls(t, cl)
	e.checkChain(t, calls, api.ShapeChatCompletions)

	// Anthropic, streaming: the thinking block comes back in the history.
	e2 := newEnv(t, proxy.Config{}, nil)
	cl2 := e2.claim(t, store.ModeTrain)
	e2.eng.Push(think, text("done"))
	body := func(extra string) string {
		return `{"model":"m","max_tokens":100,"stream":true,"tools":[{"name":"ls","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"list"}` + extra + `]}`
	}
	st, _, sse := post(t, "POST", base(e2.srv, cl2)+"/v1/messages", map[string]string{"x-api-key": cl2.Key}, body(""))
	if st != 200 || !strings.Contains(sse, `"thinking_delta"`) || !strings.Contains(sse, "I should list files.") || !strings.Contains(sse, "event: message_stop") {
		t.Fatalf("%d %s", st, sse)
	}
	i := strings.Index(sse, `"id":"toolu_`)
	tid := sse[i+6 : i+6+strings.Index(sse[i+6:], `"`)]
	st, _, sse = post(t, "POST", base(e2.srv, cl2)+"/v1/messages", map[string]string{"x-api-key": cl2.Key}, body(
		`,{"role":"assistant","content":[{"type":"thinking","thinking":"I should list files.","signature":""},{"type":"tool_use","id":"`+tid+`","name":"ls","input":{}}]},`+
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"`+tid+`","content":"a"}]}`))
	if st != 200 || !strings.Contains(sse, "done") {
		t.Fatalf("%d %s", st, sse)
	}
	e2.checkChain(t, e2.calls(t, cl2), api.ShapeMessages)
}

// TestToolCallIDsUnique: identical replies still get distinct tool call ids.
func TestToolCallIDsUnique(t *testing.T) {
	e := newEnv(t, proxy.Config{}, nil)
	cl := e.claim(t, store.ModeTrain)
	url := base(e.srv, cl) + "/v1/chat/completions"
	e.eng.Push(toolCall("ls", "{}"), toolCall("ls", "{}"))
	tools := map[string]any{"tools": []map[string]any{{"type": "function", "function": map[string]any{"name": "ls"}}}}
	msgs := []map[string]any{{"role": "user", "content": "go"}}
	m1 := chatTurn(t, url, cl.Key, msgs, tools)
	id1 := m1["tool_calls"].([]any)[0].(map[string]any)["id"].(string)
	msgs = append(msgs, m1, map[string]any{"role": "tool", "tool_call_id": id1, "content": "a"})
	m2 := chatTurn(t, url, cl.Key, msgs, tools)
	id2 := m2["tool_calls"].([]any)[0].(map[string]any)["id"].(string)
	if id1 == id2 || !strings.HasPrefix(id1, "call_") {
		t.Fatalf("tool call ids %q, %q", id1, id2)
	}
	e.checkChain(t, e.calls(t, cl), api.ShapeChatCompletions)
}

// TestStreamKeepAlive: a slow streaming call gets SSE comments while it
// waits (the SDKs ignore them); a failure after the stream started arrives
// as an in-stream error event.
func TestStreamKeepAlive(t *testing.T) {
	e := newEnv(t, proxy.Config{StreamKeepAlive: 5 * time.Millisecond}, nil)
	e.eng.Gate, e.eng.Started = make(chan struct{}), make(chan struct{}, 1)
	cl := e.claim(t, store.ModeTrain)
	// The answer comes 40 ms after the engine got the call (the stream's
	// keep-alive runs by then), however late a loaded machine gets there.
	release := func() {
		<-e.eng.Started
		time.Sleep(40 * time.Millisecond)
		e.eng.Gate <- struct{}{}
	}
	// Raw: comments, then the stream.
	e.eng.Push(text("slow answer"))
	go release()
	st, hdr, body := post(t, "POST", base(e.srv, cl)+"/v1/chat/completions", bearer(cl.Key), `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if st != 200 || hdr.Get("Content-Type") != "text/event-stream" || !strings.HasPrefix(body, ": keep-alive\n\n") || !strings.Contains(body, "slow answer") || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("%d %q", st, body)
	}
	// SDKs: comments ignored.
	e.eng.Push(text("slow again"))
	go release()
	client := openai.NewClient(option.WithBaseURL(base(e.srv, cl)+"/v1"), option.WithAPIKey(cl.Key), option.WithMaxRetries(0))
	s := client.Chat.Completions.NewStreaming(testCtx(t), openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	acc := openai.ChatCompletionAccumulator{}
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	if err := s.Err(); err != nil || acc.Choices[0].Message.Content != "slow again" {
		t.Fatalf("%v %+v", err, acc.Choices)
	}
	// Failure after the stream started: an in-stream error (no reply scripted).
	go release()
	st, _, body = post(t, "POST", base(e.srv, cl)+"/v1/messages", map[string]string{"x-api-key": cl.Key}, `{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if st != 200 || !strings.Contains(body, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\"") {
		t.Fatalf("%d %q", st, body)
	}
	if n := len(e.calls(t, cl)); n != 2 {
		t.Fatalf("%d events", n)
	}
}

// TestServeTrusted: routes mounted by the gateway under its own auth reach
// an attempt without its scoped key, and still only while it runs.
func TestServeTrusted(t *testing.T) {
	e := newEnv(t, proxy.Config{}, nil)
	cl := e.claim(t, store.ModeTrain)
	mux := http.NewServeMux()
	mux.HandleFunc("/proxy/rollout/{rid}/attempt/{aid}/mode/{mode}/openai/{rest...}", func(w http.ResponseWriter, r *http.Request) {
		e.p.ServeTrusted(w, r, r.PathValue("rid"), r.PathValue("aid"), r.PathValue("rest"))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	url := srv.URL + "/proxy/rollout/" + cl.Rollout.ID + "/attempt/" + cl.Attempt.ID + "/mode/train/openai/v1/chat/completions"
	e.eng.Push(text("trusted"))
	if st, _, body := post(t, "POST", url, nil, goodChat); st != 200 || !strings.Contains(body, "trusted") {
		t.Fatalf("%d %s", st, body)
	}
	if st, _, body := post(t, "POST", strings.Replace(url, cl.Attempt.ID, "nope", 1), nil, goodChat); st != 404 {
		t.Fatalf("unknown attempt: %d %s", st, body)
	}
	if _, err := e.st.CompleteAttempt(testCtx(t), cl.Rollout.ID, cl.Attempt.ID, store.AttemptSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	if st, _, body := post(t, "POST", url, nil, goodChat); st != 409 {
		t.Fatalf("finished attempt: %d %s", st, body)
	}
	if n := len(e.calls(t, cl)); n != 1 {
		t.Fatalf("%d events", n)
	}
}

// TestForgetKey: a key the store revoked and the proxy forgot is refused at
// once, although the proxy had cached it (AuthCacheTTL an hour here).
func TestForgetKey(t *testing.T) {
	e := newEnv(t, proxy.Config{AuthCacheTTL: time.Hour}, nil)
	cl := e.claim(t, store.ModeTrain)
	url := base(e.srv, cl) + "/events"
	if st, _, body := post(t, "POST", url, bearer(cl.Key), `{"type":"log","data":1}`); st != 200 {
		t.Fatalf("before revoke: %d %s", st, body)
	}
	if err := e.st.RevokeKey(testCtx(t), cl.Rollout.ID, cl.Attempt.ID); err != nil {
		t.Fatal(err)
	}
	// Cached: still taken until forgotten.
	if st, _, body := post(t, "POST", url, bearer(cl.Key), `{"type":"log","data":2}`); st != 200 {
		t.Fatalf("cached key: %d %s", st, body)
	}
	e.p.ForgetKey(cl.Rollout.ID, cl.Attempt.ID)
	for i := 0; i < 2; i++ { // a second call does not re-cache it
		if st, _, body := post(t, "POST", url, bearer(cl.Key), `{"type":"reward","data":1}`); st != 401 {
			t.Fatalf("revoked key after ForgetKey: %d %s", st, body)
		}
	}
}

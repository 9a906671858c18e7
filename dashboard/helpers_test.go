package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/dashboard"
	"github.com/aglrl/agl/gateway"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
)

const admin = "dash-admin-key"

// env is a real gateway (SQLite store, LLM proxy over the script engine,
// dashboard mounted) on loopback HTTP.
type env struct {
	st   store.Store
	px   *proxy.Proxy
	eng  *testutil.ScriptEngine
	tmpl *chat.ChatML
	srv  *httptest.Server
	// keys holds every scoped key handed out, to check none leaks.
	keys []string
	// extra holds events weatherRollout appends before it ends the attempt,
	// by rollout id (as a controller would: a repository task's tests).
	extra map[string][]store.NewEvent
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newEnv(t testing.TB, adminKey string) *env {
	t.Helper()
	st := testutil.SQLite(t)
	tmpl, err := chat.NewSmall()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{st: st, tmpl: tmpl, eng: &testutil.ScriptEngine{Tmpl: tmpl, ModelVersion: 3, Rendered: true}}
	e.px = proxy.New(proxy.Config{}, st, proxy.NewTokenBackend(e.eng, tmpl, tmpl.Tokenizer(), 0))
	log := slog.New(slog.DiscardHandler)
	gw := gateway.New(gateway.Options{Store: st, AdminKey: adminKey, LLM: e.px, ReapInterval: -1, Logger: log, Version: "test"})
	dashboard.New(dashboard.Options{Store: st, AdminKey: adminKey, Status: gw.Status, Tokenizer: tmpl.Tokenizer(), Logger: log}).Register(gw.Handle)
	e.srv = httptest.NewServer(gw)
	t.Cleanup(e.srv.Close)
	return e
}

// claim creates one rollout and starts its attempt.
func (e *env) claim(t testing.TB, nr store.NewRollout, worker string) store.Claim {
	t.Helper()
	ctx := testCtx(t)
	if _, err := e.st.CreateRollouts(ctx, []store.NewRollout{nr}); err != nil {
		t.Fatal(err)
	}
	c, err := e.st.Claim(ctx, store.ClaimRequest{WorkerID: worker})
	if err != nil {
		t.Fatal(err)
	}
	if c.Rollout.ID != nr.ID {
		t.Fatalf("claimed %s, want %s", c.Rollout.ID, nr.ID)
	}
	e.keys = append(e.keys, c.Key)
	return c
}

// finish reports a reward and ends the attempt.
func (e *env) finish(t testing.TB, c store.Claim, reward float64, st store.AttemptStatus) {
	t.Helper()
	ctx := testCtx(t)
	if _, err := e.st.AppendEvents(ctx, c.Rollout.ID, c.Attempt.ID, []store.NewEvent{
		{Type: store.EventReward, Data: json.RawMessage(fmt.Sprintf(`{"value":%g}`, reward))},
		{Type: store.EventLog, Data: json.RawMessage(`"harness done"`)},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.CompleteAttempt(ctx, c.Rollout.ID, c.Attempt.ID, st, ""); err != nil {
		t.Fatal(err)
	}
}

var weatherParams = map[string]any{
	"type":       "object",
	"properties": map[string]any{"city": map[string]any{"type": "string"}},
	"required":   []string{"city"},
}

// weatherRollout runs a tool-calling harness conversation through the real
// proxy with the openai-go SDK: the model calls get_weather, the harness
// answers with the tool result, the model's final reply is streamed. The
// rollout ends with the given reward.
func (e *env) weatherRollout(t testing.TB, id string, step int, city string, reward float64) store.Claim {
	t.Helper()
	cl := e.claim(t, store.NewRollout{ID: id, GroupID: fmt.Sprintf("g-s%d", step), Task: json.RawMessage(fmt.Sprintf(`{"city":%q}`, city)),
		Metadata: json.RawMessage(fmt.Sprintf(`{"step":%d}`, step))}, "worker-1")
	e.eng.Push(
		chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{Name: "get_weather", Arguments: fmt.Sprintf(`{"city": %q}`, city)}}},
		chat.Message{Role: chat.RoleAssistant, Content: "It is sunny in " + city + ", 24°C."},
	)
	client := openai.NewClient(option.WithBaseURL(e.srv.URL+"/r/"+cl.Rollout.ID+"/"+cl.Attempt.ID+"/v1"), option.WithAPIKey(cl.Key), option.WithMaxRetries(0))
	ctx := testCtx(t)
	params := openai.ChatCompletionNewParams{
		Model: "agl-test",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("You are a weather bot."),
			openai.UserMessage("What is the weather in " + city + "?"),
		},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: "get_weather", Description: openai.String("Current weather of a city"), Parameters: weatherParams,
		})},
	}
	resp, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	msg := resp.Choices[0].Message
	if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "get_weather" {
		t.Fatalf("no tool call: %+v", msg)
	}
	params.Messages = append(params.Messages, msg.ToParam(), openai.ToolMessage("sunny, 24°C", msg.ToolCalls[0].ID))
	s := client.Chat.Completions.NewStreaming(ctx, params)
	acc := openai.ChatCompletionAccumulator{}
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if got := acc.Choices[0].Message.Content; !strings.Contains(got, "sunny") {
		t.Fatalf("final reply %q", got)
	}
	if evs := e.extra[id]; len(evs) > 0 {
		if _, err := e.st.AppendEvents(ctx, cl.Rollout.ID, cl.Attempt.ID, evs); err != nil {
			t.Fatal(err)
		}
	}
	e.finish(t, cl, reward, store.AttemptSucceeded)
	return cl
}

// rawPost sends a JSON body to a route of an attempt and returns the body.
func (e *env) rawPost(t testing.TB, cl store.Claim, route, body string, hdr map[string]string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(testCtx(t), "POST", e.srv.URL+"/r/"+cl.Rollout.ID+"/"+cl.Attempt.ID+route, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+cl.Key)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: %d %s", route, resp.StatusCode, b)
	}
	return string(b)
}

// get fetches a dashboard path with the admin key (or none) and decodes
// the JSON answer into out when it is not nil.
func (e *env) get(t testing.TB, path, key string, out any) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(testCtx(t), "GET", e.srv.URL+path, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == 200 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, b)
		}
	}
	return resp.StatusCode, string(b)
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

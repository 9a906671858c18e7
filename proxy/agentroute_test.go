package proxy_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestAgentRouter: with an AgentRouter each agent's call is answered by
// its policy's backend (two engines, told apart by their versions), over
// the real openai-go SDK; a call of an agent mapped to no policy gets an
// OpenAI-shaped 400 naming the agent, and nothing is recorded for it.
func TestAgentRouter(t *testing.T) {
	tmpl, err := chat.NewSmall()
	if err != nil {
		t.Fatal(err)
	}
	writer, checker := &testutil.ScriptEngine{Tmpl: tmpl, ModelVersion: 3}, &testutil.ScriptEngine{Tmpl: tmpl, ModelVersion: 7}
	r, err := proxy.NewAgentRouter(map[string]proxy.Backend{
		"writer":  proxy.NewTokenBackend(writer, tmpl, tmpl.Tokenizer(), 0),
		"checker": proxy.NewTokenBackend(checker, tmpl, tmpl.Tokenizer(), 0),
	}, "writer")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, proxy.Config{}, r)
	if _, err := proxy.NewAgentRouter(map[string]proxy.Backend{"writer": r}, "checker"); err == nil {
		t.Errorf("a router whose default agent has no backend was accepted")
	}
	cl := e.claim(t, store.ModeTrain)
	ctx := testCtx(t)
	client := func(path string, opts ...option.RequestOption) openai.Client {
		return openai.NewClient(append(opts, option.WithBaseURL(base(e.srv, cl)+path), option.WithAPIKey(cl.Key), option.WithMaxRetries(0))...)
	}
	params := openai.ChatCompletionNewParams{Model: "gpt-4o", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
	tests := []struct {
		name    string
		c       openai.Client
		engine  *testutil.ScriptEngine
		version int64
		wantErr string
	}{
		{"writer by path", client("/agents/writer/v1"), writer, 3, ""},
		{"checker by header", client("/v1", option.WithHeader(proxy.AgentHeader, "checker")), checker, 7, ""},
		{"unmapped agent", client("/agents/rewriter/v1"), nil, 0, `agent "rewriter" is mapped to no policy`},
		{"default agent unmapped", client("/v1"), nil, 0, "the default agent"},
	}
	recorded := 0
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.engine != nil {
				tc.engine.Push(text("ok"))
			}
			resp, err := tc.c.Chat.Completions.New(ctx, params)
			if tc.wantErr != "" {
				var ae *openai.Error
				if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest || !strings.Contains(ae.Message, tc.wantErr) {
					t.Fatalf("err %v, want a 400 naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			recorded++
			calls := e.calls(t, cl)
			if len(calls) != recorded || calls[len(calls)-1].ModelVersion != tc.version || resp.Choices[0].Message.Content != "ok" {
				t.Fatalf("%d calls recorded, last answered by v%d, want v%d", len(calls), calls[len(calls)-1].ModelVersion, tc.version)
			}
		})
	}
	if n := len(e.calls(t, cl)); n != recorded {
		t.Errorf("%d calls recorded, want %d (refused calls record nothing)", n, recorded)
	}
}

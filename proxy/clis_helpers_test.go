package proxy_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/proxy"
)

// Helpers of the Claude Code / Codex tests: the Qwen3 tokenizer and chat
// template (the model those CLIs are trained behind), the captured first
// requests, the installed CLIs.

var qwen3Once struct {
	sync.Once
	ml  *chat.ChatML
	err error
}

// qwen3ChatML is the Qwen3 tokenizer with its ChatML template (thinking on).
func qwen3ChatML(t testing.TB) *chat.ChatML {
	t.Helper()
	dir := testutil.TokenizerDir(t, "qwen3")
	qwen3Once.Do(func() {
		f, err := chat.LoadDir(dir)
		if err != nil {
			qwen3Once.err = err
			return
		}
		ml, ok := f.(*chat.ChatML)
		if !ok {
			qwen3Once.err = fmt.Errorf("%s loaded as %T, want ChatML", dir, f)
			return
		}
		qwen3Once.ml = ml
	})
	if qwen3Once.err != nil {
		t.Fatalf("load the Qwen3 tokenizer: %v", qwen3Once.err)
	}
	return qwen3Once.ml
}

// newQwenEnv is newEnv with the Qwen3 tokenizer and template: a gateway on
// loopback over SQLite whose engine answers scripted replies, rendered to
// ids by that template (so the gateway parses real Qwen3 tool-call text).
// wrap, if given, wraps the gateway's handler (before it serves).
func newQwenEnv(t testing.TB, cfg proxy.Config, wrap ...func(http.Handler) http.Handler) *env {
	ml := qwen3ChatML(t)
	e := &env{st: testutil.SQLite(t), tmpl: ml, eng: &testutil.ScriptEngine{Tmpl: ml, ModelVersion: 3}}
	e.p = proxy.New(cfg, e.st, proxy.NewTokenBackend(e.eng, ml, ml.Tokenizer(), 0))
	var h http.Handler = e.p
	for _, w := range wrap {
		h = w(h)
	}
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)
	return e
}

// cliFixture is a CLI's first request as captured from real traffic
// (testdata/*-turn{1,2}.json): method, path with query, headers, body.
type cliFixture struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
	Body    json.RawMessage   `json:"body"`
}

func loadCLIFixture(t testing.TB, file string) cliFixture {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	var f cliFixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return f
}

// headers returns the fixture's headers with the API key replaced by key.
func (f cliFixture) headers(key string) map[string]string {
	h := map[string]string{}
	for k, v := range f.Headers {
		switch strings.ToLower(k) {
		case "x-api-key", "x-goog-api-key":
			v = key
		case "authorization":
			v = "Bearer " + key
		}
		h[k] = v
	}
	return h
}

// cliFixtures are the captured requests of one run of each CLI (its
// TestXxxCLI with AGL_CLI_CAPTURE set): turn 1 asks the model, which
// answers replies[0] (a tool call); turn 2 sends the tool's output back,
// answered by replies[1].
var cliFixtures = []struct {
	cli     string
	shape   string
	turns   [2]string
	replies [2]chat.Message
	fields  map[string]func(*testing.T, *fxRun) // TestCLIRequestFields' table
}{
	{"claude-code", api.ShapeMessages, [2]string{"claude-code-2.1.328-turn1.json", "claude-code-2.1.328-turn2.json"}, claudeReplies, claudeCodeFields},
	{"codex", api.ShapeResponses, [2]string{"codex-0.171.0-turn1.json", "codex-0.171.0-turn2.json"}, codexReplies, codexFields},
	{"gemini-cli", api.ShapeGenerateContent, [2]string{"gemini-cli-0.61.0-turn1.json", "gemini-cli-0.61.0-turn2.json"}, geminiReplies, geminiCLIFields},
	{"opencode-openai-compatible", api.ShapeChatCompletions, opencodeTurns("openai-compatible"), opencodeReplies, chatFields},
	{"opencode-openai", api.ShapeResponses, opencodeTurns("openai"), opencodeReplies, responsesFields},
	{"opencode-anthropic", api.ShapeMessages, opencodeTurns("anthropic"), opencodeReplies, messagesFields},
	{"opencode-google", api.ShapeGenerateContent, opencodeTurns("google"), opencodeReplies, generateContentFields},
	{"qwen-code-openai", api.ShapeChatCompletions, qwenCodeTurns("openai"), qwenCodeReplies, chatFields},
	{"qwen-code-openai-responses", api.ShapeResponses, qwenCodeTurns("openai-responses"), qwenCodeReplies, responsesFields},
	{"qwen-code-anthropic", api.ShapeMessages, qwenCodeTurns("anthropic"), qwenCodeReplies, messagesFields},
	{"qwen-code-gemini", api.ShapeGenerateContent, qwenCodeTurns("gemini"), qwenCodeReplies, generateContentFields},
}

// opencodeTurns and qwenCodeTurns name the fixtures of one API mode of
// OpenCode 1.18.33 (its provider) and Qwen Code 0.24.4 (its auth type).
func opencodeTurns(provider string) [2]string {
	return [2]string{"opencode-1.18.33-" + provider + "-turn1.json", "opencode-1.18.33-" + provider + "-turn2.json"}
}

func qwenCodeTurns(authType string) [2]string {
	return [2]string{"qwen-code-0.24.4-" + authType + "-turn1.json", "qwen-code-0.24.4-" + authType + "-turn2.json"}
}

// The scripted model of the CLI tests: think, call the CLI's own shell
// tool with echo $((2+3)), then answer.
var (
	claudeReplies = [2]chat.Message{
		{Role: chat.RoleAssistant, Reasoning: "The user wants 2+3 computed with Bash.", Content: "I'll compute it with Bash.", ToolCalls: []chat.ToolCall{{Name: "Bash", Arguments: `{"command": "echo $((2+3))", "description": "Compute 2+3"}`}}},
		{Role: chat.RoleAssistant, Content: "2 + 3 = 5."},
	}
	codexReplies = [2]chat.Message{
		{Role: chat.RoleAssistant, Reasoning: "Run the command.", ToolCalls: []chat.ToolCall{{Name: "exec_command", Arguments: `{"cmd": "echo $((2+3))"}`}}},
		{Role: chat.RoleAssistant, Content: "2 + 3 = 5."},
	}
)

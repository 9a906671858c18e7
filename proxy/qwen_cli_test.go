package proxy_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
)

// qwenCodeReplies: the scripted model of TestQwenCodeCLI calls Qwen
// Code's shell tool, then answers. The command sleeps after its output:
// Qwen Code 0.24.4's one-shot shell (child_process) settles on the
// child's exit event, and drops output not read by then, which happens to
// a command that exits at once on a loaded machine.
var qwenCodeReplies = [2]chat.Message{
	{Role: chat.RoleAssistant, Reasoning: "Run the command.", ToolCalls: []chat.ToolCall{{Name: "run_shell_command", Arguments: `{"command": "echo $((2+3)); sleep 1", "description": "Compute 2+3", "is_background": false}`}}},
	{Role: chat.RoleAssistant, Content: "2 + 3 = 5."},
}

// qwenCodeAuthTypes are Qwen Code's --auth-type modes that take an API
// key and a base URL, one per API shape the gateway serves: the
// modelProviders entry for the gateway (under provider, with extra
// fields) and the path its baseUrl takes after the attempt's base (the
// Anthropic and Google SDKs add /v1 and /v1beta themselves).
var qwenCodeAuthTypes = []struct {
	authType, provider, extra, path, shape string
}{
	{"openai", "openai", "", "/v1", api.ShapeChatCompletions},
	{"openai-responses", "openai", `"wireApi": "responses", `, "/v1", api.ShapeResponses},
	{"anthropic", "anthropic", "", "", api.ShapeMessages},
	{"gemini", "gemini", "", "", api.ShapeGenerateContent},
}

// TestQwenCodeCLI: qwen --auth-type … --output-format json "…" against
// the gateway, once per auth type, the gateway a model provider in
// ~/.qwen/settings.json (telemetry, usage statistics and auto-update
// off); the model calls run_shell_command.
func TestQwenCodeCLI(t *testing.T) {
	bin := filepath.Join(testutil.CLIs(t, "qwen"), "qwen")
	for _, tc := range qwenCodeAuthTypes {
		t.Run(tc.authType, func(t *testing.T) {
			t.Parallel() // each mode has its own gateway, store and HOME
			e := newQwenEnv(t, proxy.Config{}, captureCalls(t, "qwen-code-"+tc.authType))
			cl := e.claim(t, store.ModeTrain)
			e.eng.Push(qwenCodeReplies[:]...)
			home, work := t.TempDir(), t.TempDir()
			settings := `{
  "modelProviders": {"` + tc.provider + `": [{"id": "agl-test", "name": "agl-test", ` + tc.extra + `"envKey": "AGL_API_KEY", "baseUrl": "` + base(e.srv, cl) + tc.path + `"}]},
  "security": {"auth": {"selectedType": "` + tc.authType + `"}},
  "model": {"name": "agl-test"},
  "general": {"enableAutoUpdate": false},
  "telemetry": {"enabled": false},
  "privacy": {"usageStatisticsEnabled": false}
}`
			if err := os.MkdirAll(filepath.Join(home, ".qwen"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(home, ".qwen", "settings.json"), []byte(settings), 0o600); err != nil {
				t.Fatal(err)
			}
			out := cliRun(t, work, []string{"HOME=" + home, "AGL_API_KEY=" + cl.Key,
				"QWEN_TELEMETRY_ENABLED=false", "QWEN_USAGE_STATISTICS_ENABLED=false", "QWEN_CODE_NO_RELAUNCH=true", "CI=true", "NO_BROWSER=true",
			}, bin, "--auth-type", tc.authType, "-m", "agl-test", "--approval-mode", "yolo", "--output-format", "json",
				"What is 2+3? Run echo $((2+3)); sleep 1 with the shell tool.")
			checkQwenCodeOutput(t, out)
			checkCLICalls(t, e, cl, tc.shape)
		})
	}
}

// hasLine5: s has a line 5 (or "Output: 5", as Gemini CLI and Qwen Code
// report a command's output).
func hasLine5(s string) bool {
	return slices.ContainsFunc(strings.Split(s, "\n"), func(l string) bool { return strings.TrimPrefix(l, "Output: ") == "5" })
}

// checkQwenCodeOutput checks Qwen Code's --output-format json output (the
// session's messages, Claude Code's stream-json shapes): a tool result
// holding 5 went back to the model, and the run ended in success with the
// final answer.
func checkQwenCodeOutput(t *testing.T, out []byte) {
	t.Helper()
	var msgs []map[string]any
	if err := json.Unmarshal(out, &msgs); err != nil {
		t.Fatalf("output is not a JSON array of messages (%v):\n%s", err, tail(string(out)))
	}
	var result map[string]any
	ranTool := false
	for _, m := range msgs {
		switch m["type"] {
		case "result":
			result = m
		case "user":
			msg, _ := m["message"].(map[string]any)
			each(msg, "content", func(b map[string]any) {
				if b["type"] == "tool_result" && b["is_error"] != true && slices.ContainsFunc(texts(b["content"]), hasLine5) {
					ranTool = true
				}
			})
		}
	}
	if result == nil || result["subtype"] != "success" || result["is_error"] != false || result["result"] != "2 + 3 = 5." {
		t.Fatalf("no successful result with the final answer: %v\n%s", result, tail(string(out)))
	}
	if !ranTool {
		t.Errorf("Qwen Code did not report a tool result 5:\n%s", tail(string(out)))
	}
}

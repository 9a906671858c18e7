package proxy_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
)

// geminiReplies: the scripted model of TestGeminiCLI calls Gemini CLI's
// shell tool, then answers. (Gemini CLI refuses commands with $(…):
// expr computes the sum instead.)
var geminiReplies = [2]chat.Message{
	{Role: chat.RoleAssistant, Reasoning: "Run the command.", ToolCalls: []chat.ToolCall{{Name: "run_shell_command", Arguments: `{"command": "expr 2 + 3", "description": "Compute 2+3"}`}}},
	{Role: chat.RoleAssistant, Content: "2 + 3 = 5."},
}

// geminiCLISettings switches off what Gemini CLI reaches out for on its
// own (telemetry, usage statistics, update checks) and selects API-key
// authentication.
const geminiCLISettings = `{
  "security": {"auth": {"selectedType": "gemini-api-key"}},
  "telemetry": {"enabled": false},
  "privacy": {"usageStatisticsEnabled": false},
  "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
  "ide": {"enabled": false}
}
`

// TestGeminiCLI: gemini -p … against the gateway's Gemini API route
// (GOOGLE_GEMINI_BASE_URL, GEMINI_API_KEY); the model calls
// run_shell_command.
func TestGeminiCLI(t *testing.T) {
	bin := filepath.Join(testutil.CLIs(t, "gemini"), "gemini")
	e := newQwenEnv(t, proxy.Config{}, captureCalls(t, "gemini-cli"))
	cl := e.claim(t, store.ModeTrain)
	e.eng.Push(geminiReplies[:]...)
	home, work := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".gemini"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".gemini", "settings.json"), []byte(geminiCLISettings), 0o600); err != nil {
		t.Fatal(err)
	}
	out := cliRun(t, work, []string{
		"HOME=" + home, "GOOGLE_GEMINI_BASE_URL=" + base(e.srv, cl), "GEMINI_API_KEY=" + cl.Key,
		"GEMINI_CLI_NO_RELAUNCH=true", "GEMINI_TELEMETRY_ENABLED=false", "NO_BROWSER=true", "CI=true", "GEMINI_CLI_TRUST_WORKSPACE=true",
	}, bin, "-m", "gemini-2.5-flash", "--approval-mode", "yolo", "--output-format", "json",
		"-p", "What is 2+3? Run expr 2 + 3 with the shell tool.")
	var res struct {
		Response string `json:"response"`
		Stats    struct {
			Tools struct {
				TotalSuccess int `json:"totalSuccess"`
			} `json:"tools"`
		} `json:"stats"`
	}
	if err := json.Unmarshal(out, &res); err != nil || strings.TrimSpace(res.Response) != "2 + 3 = 5." {
		t.Fatalf("no final answer in the output (%v):\n%s", err, tail(string(out)))
	}
	if res.Stats.Tools.TotalSuccess != 1 {
		t.Errorf("%d successful tool calls, want 1:\n%s", res.Stats.Tools.TotalSuccess, tail(string(out)))
	}
	checkCLICalls(t, e, cl, api.ShapeGenerateContent)
}

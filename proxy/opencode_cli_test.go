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

// opencodeReplies: the scripted model of TestOpenCodeCLI calls OpenCode's
// bash tool, then answers.
var opencodeReplies = [2]chat.Message{
	{Role: chat.RoleAssistant, Reasoning: "Run the command.", ToolCalls: []chat.ToolCall{{Name: "bash", Arguments: `{"command": "echo $((2+3))", "description": "Compute 2+3"}`}}},
	{Role: chat.RoleAssistant, Content: "2 + 3 = 5."},
}

// opencodeProviders are the AI SDK providers OpenCode has built in, one
// per API shape the gateway serves, with the path their baseURL takes
// after the attempt's base.
var opencodeProviders = []struct {
	name, npm, path, shape string
}{
	{"openai-compatible", "@ai-sdk/openai-compatible", "/v1", api.ShapeChatCompletions},
	{"openai", "@ai-sdk/openai", "/v1", api.ShapeResponses},
	{"anthropic", "@ai-sdk/anthropic", "/v1", api.ShapeMessages},
	{"google", "@ai-sdk/google", "/v1beta", api.ShapeGenerateContent},
}

// TestOpenCodeCLI: opencode run --format json … against the gateway, once
// per provider (Chat Completions, Responses, Anthropic Messages, Gemini
// API), each a custom provider "agl" in the global opencode.json; the
// model calls bash.
func TestOpenCodeCLI(t *testing.T) {
	binDir := testutil.CLIs(t, "opencode")
	for _, pv := range opencodeProviders {
		t.Run(pv.name, func(t *testing.T) {
			t.Parallel() // each mode has its own gateway, store and HOME
			e := newQwenEnv(t, proxy.Config{}, captureCalls(t, "opencode-"+pv.name))
			cl := e.claim(t, store.ModeTrain)
			e.eng.Push(opencodeReplies[:]...)
			home, work := t.TempDir(), t.TempDir()
			opencodeConfigDir(t, filepath.Join(home, ".config", "opencode"), filepath.Dir(binDir), `{
  "autoupdate": false,
  "share": "disabled",
  "model": "agl/agl-test",
  "provider": {"agl": {"npm": "`+pv.npm+`", "name": "agl",
    "options": {"baseURL": "`+base(e.srv, cl)+pv.path+`", "apiKey": "{env:AGL_API_KEY}"},
    "models": {"agl-test": {"name": "agl-test", "tool_call": true, "reasoning": true}}}},
  "permission": {"bash": "allow"}
}`)
			out := cliRun(t, work, []string{
				"HOME=" + home, "AGL_API_KEY=" + cl.Key,
				"OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_SHARE=1",
				"OPENCODE_DISABLE_DEFAULT_PLUGINS=1", "OPENCODE_DISABLE_LSP_DOWNLOAD=1",
				"OPENCODE_DISABLE_CLAUDE_CODE=1", "OPENCODE_DISABLE_EXTERNAL_SKILLS=1",
			}, filepath.Join(binDir, "opencode"), "run", "--pure", "--format", "json", "--title", "agl test",
				"What is 2+3? Run echo $((2+3)) with the bash tool.")
			var answer, toolOut, finish string
			for _, m := range jsonLines(t, out) {
				part, _ := m["part"].(map[string]any)
				switch m["type"] {
				case "tool_use":
					if st, _ := part["state"].(map[string]any); part["tool"] == "bash" && st["status"] == "completed" {
						toolOut, _ = st["output"].(string)
					}
				case "text":
					answer, _ = part["text"].(string)
				case "step_finish":
					finish, _ = part["reason"].(string)
				}
			}
			if answer != "2 + 3 = 5." || finish != "stop" {
				t.Fatalf("turn not finished with the final answer (answer %q, last step %q):\n%s", answer, finish, tail(string(out)))
			}
			if strings.TrimSpace(toolOut) != "5" {
				t.Errorf("bash output %q, want 5:\n%s", toolOut, tail(string(out)))
			}
			checkCLICalls(t, e, cl, pv.shape)
		})
	}
}

// opencodeConfigDir writes OpenCode's global config directory: config as
// opencode.json, and the @opencode-ai/plugin package it installs into
// every config directory at startup, already there (node_modules links
// to nodeModules, the pinned install, which holds the plugin at OpenCode's
// version), so OpenCode finds it installed and does not fetch
// it from the npm registry.
func opencodeConfigDir(t *testing.T, dir, nodeModules, config string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(nodeModules, "@opencode-ai", "plugin", "package.json"))
	if err != nil {
		t.Fatalf("the pinned CLIs lack @opencode-ai/plugin (run scripts/install-clis.sh): %v", err)
	}
	var plugin struct{ Version string }
	if err := json.Unmarshal(b, &plugin); err != nil {
		t.Fatal(err)
	}
	deps := `{"dependencies": {"@opencode-ai/plugin": "` + plugin.Version + `"}}`
	files := map[string]string{
		"opencode.json":     config,
		"package.json":      deps,
		"package-lock.json": `{"lockfileVersion": 3, "packages": {"": ` + deps + `}}`,
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, s := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(nodeModules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
}

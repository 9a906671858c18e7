package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
)

// The real CLIs, unmodified (installed from npm by scripts/install-clis.sh),
// run non-interactively against the gateway. The engine is scripted: its
// first reply is a tool call in the CLI's own tool, as Qwen3 writes it
// (<tool_call>{"name": …, "arguments": …}</tool_call>, parsed by the
// gateway's template), its second a final answer. Each CLI must run the
// command, send its output back, and finish; the events hold the exact ids
// of both calls.

// cliRun runs a CLI with env (and PATH) in dir, returning stdout; it fails
// the test with stderr if the CLI does not exit 0 within two minutes.
func cliRun(t *testing.T, dir string, env []string, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8", "TERM=dumb"}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), err, tail(stdout.String()), tail(stderr.String()))
	}
	return stdout.Bytes()
}

func tail(s string) string {
	if len(s) > 4000 {
		return "…" + s[len(s)-4000:]
	}
	return s
}

// jsonLines decodes each JSON line of out.
func jsonLines(t *testing.T, out []byte) []map[string]any {
	t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			lines = append(lines, m)
		}
	}
	return lines
}

// checkCLICalls checks the rollout's events after a CLI run: two streamed
// calls of the given API, exact ids (what the engine consumed and
// produced), the second continuing the first's token state and holding the
// command's output, 5.
func checkCLICalls(t *testing.T, e *env, cl store.Claim, shape string) []api.ModelCall {
	t.Helper()
	calls := e.calls(t, cl)
	if len(calls) != 2 {
		t.Fatalf("%d model_request events, want 2 (tool call, final answer)", len(calls))
	}
	e.checkChain(t, calls, shape)
	for k, c := range calls {
		if !c.Stream {
			t.Errorf("call %d was not streamed", k)
		}
	}
	added := e.tmpl.Tokenizer().Decode(calls[1].PromptIDs[len(calls[0].PromptIDs)+len(calls[0].ResponseIDs):])
	_, resp, _ := strings.Cut(added, "<tool_response>")
	resp, _, _ = strings.Cut(resp, "</tool_response>")
	// Gemini CLI reports a command's output as "Output: 5"; OpenCode's
	// Gemini provider as a functionResponse {"name": …, "content": "5\n"}.
	var fr struct{ Content string }
	if json.Unmarshal([]byte(strings.TrimSpace(resp)), &fr) == nil && fr.Content != "" {
		resp = fr.Content
	}
	if !hasLine5(resp) {
		t.Errorf("the second call's new prompt tokens hold no tool response with a line 5: %q", added)
	}
	t.Logf("first prompt %d tokens, second %d (+%d new); ignored: %q", len(calls[0].PromptIDs), len(calls[1].PromptIDs), len(calls[1].PromptIDs)-len(calls[0].PromptIDs)-len(calls[0].ResponseIDs), calls[0].Ignored)
	return calls
}

// captureCalls records the model calls a CLI makes (method, path after
// the attempt's base, headers, body) in front of the gateway. With
// AGL_CLI_CAPTURE=DIR set, the tests write them to DIR/NAME-turnK.json in
// the testdata fixture format (the key replaced by "test-key"): how the
// testdata/*-turn{1,2}.json fixtures were captured (then named with the
// CLI's version).
// It returns the handler wrapper for newQwenEnv.
func captureCalls(t *testing.T, name string) func(http.Handler) http.Handler {
	var mu sync.Mutex
	var got []cliFixture
	wrap := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			if r.Method == http.MethodPost && json.Valid(body) && (strings.Contains(r.URL.Path, "/v1/messages") || strings.Contains(r.URL.Path, "/v1/chat/completions") || strings.Contains(r.URL.Path, "/v1/responses") || strings.Contains(r.URL.Path, "/v1beta/")) {
				h := map[string]string{}
				for k, v := range r.Header {
					switch strings.ToLower(k) {
					case "content-length", "host", "connection", "accept-encoding":
					case "x-api-key", "x-goog-api-key":
						h[k] = "test-key"
					case "authorization":
						h[k] = "Bearer test-key"
					default:
						h[k] = v[0]
					}
				}
				mu.Lock()
				// The path after /r/{rollout}/{attempt}.
				parts := strings.SplitN(r.URL.RequestURI(), "/", 5)
				got = append(got, cliFixture{Method: r.Method, Path: "/" + parts[len(parts)-1], Headers: h, Body: body})
				mu.Unlock()
			}
			next.ServeHTTP(w, r)
		})
	}
	dir := os.Getenv("AGL_CLI_CAPTURE")
	if dir == "" {
		return wrap
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for k, f := range got {
			b, err := json.MarshalIndent(f, "", " ")
			if err != nil {
				t.Error(err)
				return
			}
			if err := os.WriteFile(filepath.Join(dir, name+"-turn"+strconv.Itoa(k+1)+".json"), append(b, '\n'), 0o644); err != nil {
				t.Error(err)
			}
		}
	})
	return wrap
}

// TestClaudeCodeCLI: claude -p … --output-format stream-json against the
// gateway's Anthropic route; the model calls Bash.
func TestClaudeCodeCLI(t *testing.T) {
	bin := filepath.Join(testutil.CLIs(t, "claude"), "claude")
	e := newQwenEnv(t, proxy.Config{}, captureCalls(t, "claude-code"))
	cl := e.claim(t, store.ModeTrain)
	e.eng.Push(claudeReplies[:]...)
	home, work := t.TempDir(), t.TempDir()
	out := cliRun(t, work, []string{
		"HOME=" + home, "CLAUDE_CONFIG_DIR=" + filepath.Join(home, ".claude"),
		"ANTHROPIC_BASE_URL=" + base(e.srv, cl), "ANTHROPIC_API_KEY=" + cl.Key,
		"DISABLE_TELEMETRY=1", "DISABLE_AUTOUPDATER=1", "DISABLE_ERROR_REPORTING=1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
	}, bin, "-p", "What is 2+3? Run echo $((2+3)) with the Bash tool.",
		"--output-format", "stream-json", "--verbose", "--max-turns", "4", "--allowedTools", "Bash")
	var result map[string]any
	ranTool := false
	for _, m := range jsonLines(t, out) {
		switch m["type"] {
		case "result":
			result = m
		case "user":
			// The tool result Claude Code sends back.
			if b, _ := json.Marshal(m); bytes.Contains(b, []byte(`"tool_result"`)) && bytes.Contains(b, []byte(`5`)) {
				ranTool = true
			}
		}
	}
	if result == nil || result["subtype"] != "success" || result["is_error"] != false || !strings.Contains(result["result"].(string), "2 + 3 = 5.") {
		t.Fatalf("no successful result with the final answer: %v\n%s", result, tail(string(out)))
	}
	if !ranTool {
		t.Errorf("Claude Code did not report running Bash with output 5:\n%s", tail(string(out)))
	}
	checkCLICalls(t, e, cl, api.ShapeMessages)
}

// TestCodexCLI: codex exec --json against the gateway's Responses route
// (a model provider with wire_api = "responses"); the model calls
// exec_command.
func TestCodexCLI(t *testing.T) {
	bin := filepath.Join(testutil.CLIs(t, "codex"), "codex")
	e := newQwenEnv(t, proxy.Config{}, captureCalls(t, "codex"))
	cl := e.claim(t, store.ModeTrain)
	e.eng.Push(codexReplies[:]...)
	out := runCodex(t, bin, e, cl, "What is 2+3? Run echo $((2+3)).")
	var answer, cmdOut string
	completed := false
	for _, m := range jsonLines(t, out) {
		switch m["type"] {
		case "item.completed":
			it, _ := m["item"].(map[string]any)
			switch it["type"] {
			case "agent_message":
				answer, _ = it["text"].(string)
			case "command_execution":
				cmdOut, _ = it["aggregated_output"].(string)
			}
		case "turn.completed":
			completed = true
		}
	}
	if !completed || answer != "2 + 3 = 5." {
		t.Fatalf("turn not completed with the final answer (completed=%v, answer %q):\n%s", completed, answer, tail(string(out)))
	}
	if strings.TrimSpace(cmdOut) != "5" {
		t.Errorf("command output %q, want 5:\n%s", cmdOut, tail(string(out)))
	}
	checkCLICalls(t, e, cl, api.ShapeResponses)
}

// TestCodexCLINamespaceCall: the model calls a function of Codex's
// multi_agent_v1 namespace (close_agent, on an agent that does not exist:
// harmless); Codex must route the function_call the gateway returns (name
// close_agent, namespace multi_agent_v1) to that tool, whose error about
// the unknown agent comes back as the call's output, not an "unsupported
// call".
func TestCodexCLINamespaceCall(t *testing.T) {
	bin := filepath.Join(testutil.CLIs(t, "codex"), "codex")
	e := newQwenEnv(t, proxy.Config{})
	cl := e.claim(t, store.ModeTrain)
	e.eng.Push(toolCall("multi_agent_v1__close_agent", `{"target": "agent-that-does-not-exist"}`), text("There was no such agent."))
	out := runCodex(t, bin, e, cl, "Close the agent agent-that-does-not-exist.")
	calls := e.calls(t, cl)
	if len(calls) != 2 {
		t.Fatalf("%d model calls, want 2:\n%s", len(calls), tail(string(out)))
	}
	var req struct {
		Input []struct {
			Type, CallID string
			Output       json.RawMessage
		} `json:"input"`
	}
	if err := json.Unmarshal(calls[1].Request, &req); err != nil {
		t.Fatal(err)
	}
	var output string
	for _, it := range req.Input {
		if it.Type == "function_call_output" {
			output = string(it.Output)
		}
	}
	t.Logf("close_agent output: %s", output)
	if output == "" || strings.Contains(strings.ToLower(output), "unsupported") {
		t.Errorf("Codex did not run the namespaced call: output %s", output)
	}
	e.checkChain(t, calls, api.ShapeResponses)
}

// runCodex runs codex exec --json with an isolated CODEX_HOME whose
// provider is the gateway (wire_api = "responses").
func runCodex(t *testing.T, bin string, e *env, cl store.Claim, prompt string) []byte {
	t.Helper()
	home, work := t.TempDir(), t.TempDir()
	codexHome := filepath.Join(home, ".codex")
	if err := os.MkdirAll(codexHome, 0o700); err != nil {
		t.Fatal(err)
	}
	config := `model = "agl-test"
model_provider = "agl"
[model_providers.agl]
name = "agl"
base_url = "` + base(e.srv, cl) + `/v1"
wire_api = "responses"
env_key = "AGL_API_KEY"
request_max_retries = 0
stream_max_retries = 0
[analytics]
enabled = false
`
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return cliRun(t, work, []string{"HOME=" + home, "CODEX_HOME=" + codexHome, "AGL_API_KEY=" + cl.Key},
		bin, "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", prompt)
}

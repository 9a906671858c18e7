// Package calc holds the Calc-X-style example: make_data.py (seeded tasks
// and SFT demonstrations) and harness.py (an OpenAI Chat Completions client
// with a calculator tool). These tests run both with python3 against a
// loopback server that answers in the Chat Completions wire format.
package calc

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aglrl/agl/internal/testutil"
)

type task struct {
	ID         string `json:"id"`
	Question   string `json:"question"`
	Expression string `json:"expression"`
	Answer     int    `json:"answer"`
}

// TestMakeData: the generator is deterministic, train and val tasks are
// disjoint, answers are right, the skill demonstrations all call the
// calculator and the habit ones mix calculator calls with answers from
// memory in about the configured share.
func TestMakeData(t *testing.T) {
	py := testutil.Python(t)
	dirs := []string{t.TempDir(), t.TempDir()}
	for _, d := range dirs {
		out, err := exec.Command(py, "make_data.py", d, "--train", "300", "--val", "50", "--sft-tool", "200", "--sft-mix", "600", "--tool-share", "0.1", "--times-tool-share", "0.7").CombinedOutput()
		if err != nil {
			t.Fatalf("make_data.py: %v\n%s", err, out)
		}
	}
	for _, name := range []string{"train.jsonl", "val.jsonl", "sft_tool.jsonl", "sft_mix.jsonl"} {
		a, _ := os.ReadFile(filepath.Join(dirs[0], name))
		b, _ := os.ReadFile(filepath.Join(dirs[1], name))
		if len(a) == 0 || string(a) != string(b) {
			t.Errorf("%s: not deterministic or empty (%d, %d bytes)", name, len(a), len(b))
		}
	}
	train := testutil.ReadJSONL[task](t, filepath.Join(dirs[0], "train.jsonl"))
	val := testutil.ReadJSONL[task](t, filepath.Join(dirs[0], "val.jsonl"))
	if len(train) != 300 || len(val) != 50 {
		t.Fatalf("%d train, %d val tasks", len(train), len(val))
	}
	seen := map[string]bool{}
	for _, x := range train {
		seen[x.ID] = true
	}
	for _, x := range append(train, val...) {
		if got := eval(t, x.Expression); got != x.Answer {
			t.Errorf("%s: %s = %d, task says %d", x.ID, x.Expression, got, x.Answer)
		}
	}
	for _, x := range val {
		if seen[x.ID] {
			t.Errorf("val task %s is also a train task", x.ID)
		}
	}
	type demo struct {
		Messages []struct {
			Role      string            `json:"role"`
			Content   string            `json:"content"`
			ToolCalls []json.RawMessage `json:"tool_calls"`
		} `json:"messages"`
	}
	// count returns how many of a file's demonstrations call the
	// calculator, for multiplications and for the others; every other one
	// must answer from memory.
	count := func(name string) (timesTool, times, otherTool, other int) {
		demos := testutil.ReadJSONL[demo](t, filepath.Join(dirs[0], name))
		for _, d := range demos {
			tool := len(d.Messages) == 5 && len(d.Messages[2].ToolCalls) == 1
			if !tool && (len(d.Messages) != 3 || !strings.HasPrefix(d.Messages[2].Content, "The answer is ")) {
				t.Fatalf("%s: demo neither a calculator call nor an answer from memory: %+v", name, d)
			}
			n, k := &other, &otherTool
			if strings.Contains(d.Messages[1].Content, " times ") {
				n, k = &times, &timesTool
			}
			*n++
			if tool {
				*k++
			}
		}
		return
	}
	if tt, tn, ot, on := count("sft_tool.jsonl"); tn+on != 200 || tt != tn || ot != on {
		t.Errorf("sft_tool.jsonl: %d+%d of %d+%d demos call the calculator, want all of 200", tt, ot, tn, on)
	}
	tt, tn, ot, on := count("sft_mix.jsonl")
	if tn+on != 600 || tn < 100 {
		t.Fatalf("sft_mix.jsonl: %d multiplications, %d others, want 600 with about a third multiplications", tn, on)
	}
	if ts, os := float64(tt)/float64(tn), float64(ot)/float64(on); ts < 0.6 || ts > 0.8 || os < 0.05 || os > 0.15 {
		t.Errorf("sft_mix.jsonl: calculator share %.2f of multiplications (want about 0.7), %.2f of the others (want about 0.1)", ts, os)
	}
}

func eval(t *testing.T, expr string) int {
	for _, op := range []string{"+", "-", "*"} {
		if a, b, ok := strings.Cut(expr, op); ok {
			x, err1 := strconv.Atoi(a)
			y, err2 := strconv.Atoi(b)
			if err1 != nil || err2 != nil {
				break
			}
			switch op {
			case "+":
				return x + y
			case "-":
				return x - y
			default:
				return x * y
			}
		}
	}
	t.Fatalf("expression %q", expr)
	return 0
}

// script answers one Chat Completions request of a conversation.
type script func(req map[string]any) map[string]any

func toolCall(expr string) map[string]any {
	args, _ := json.Marshal(map[string]string{"expression": expr})
	return map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
		"id": "call_1", "type": "function", "function": map[string]any{"name": "calculator", "arguments": string(args)}}}}
}

func text(s string) map[string]any { return map[string]any{"role": "assistant", "content": s} }

// TestHarnessRewards runs harness.py against a loopback server speaking the
// Chat Completions wire format and checks the reward it writes and what it
// sends (tools, the tool result).
func TestHarnessRewards(t *testing.T) {
	py := testutil.Python(t)
	tk := `{"question":"What is 12 times 3?","expression":"12*3","answer":36}`
	cases := []struct {
		name    string
		replies []map[string]any
		want    string
	}{
		{"tool then right number", []map[string]any{toolCall("12*3"), text("36")}, "1.0"},
		{"right number from memory", []map[string]any{text("The answer is 36.")}, "1.0"},
		{"tool then wrong number", []map[string]any{toolCall("12*3"), text("35")}, "0.2"},
		{"malformed tool call, then right number", []map[string]any{toolCall("import os"), text("36")}, "1.0"},
		{"malformed tool call only", []map[string]any{toolCall("12**3**99"), text("no idea")}, "0.0"},
		{"wrong number from memory", []map[string]any{text("The answer is 38.")}, "0.0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var reqs []map[string]any
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer k" {
					http.Error(w, `{"error":{"message":"bad path or key"}}`, http.StatusUnauthorized)
					return
				}
				var req map[string]any
				if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				mu.Lock()
				n := len(reqs)
				reqs = append(reqs, req)
				mu.Unlock()
				if n >= len(tc.replies) {
					http.Error(w, `{"error":{"message":"unexpected call"}}`, http.StatusBadRequest)
					return
				}
				finish := "stop"
				if tc.replies[n]["tool_calls"] != nil {
					finish = "tool_calls"
				}
				json.NewEncoder(w).Encode(map[string]any{"id": fmt.Sprint("chatcmpl-", n), "object": "chat.completion",
					"model": req["model"], "choices": []any{map[string]any{"index": 0, "message": tc.replies[n], "finish_reason": finish}}})
			}))
			defer srv.Close()
			rf := filepath.Join(t.TempDir(), "reward")
			cmd := exec.Command(py, "harness.py")
			cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+srv.URL+"/v1", "OPENAI_API_KEY=k", "AGL_TASK="+tk, "AGL_REWARD_FILE="+rf)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("harness: %v\n%s", err, out)
			}
			got, err := os.ReadFile(rf)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("reward %q, want %q", got, tc.want)
			}
			if len(reqs) != len(tc.replies) {
				t.Fatalf("%d calls, want %d", len(reqs), len(tc.replies))
			}
			if tools, _ := reqs[0]["tools"].([]any); len(tools) != 1 {
				t.Errorf("tools sent: %v", reqs[0]["tools"])
			}
			if len(reqs) > 1 {
				msgs := reqs[1]["messages"].([]any)
				last := msgs[len(msgs)-1].(map[string]any)
				if last["role"] != "tool" || last["tool_call_id"] != "call_1" {
					t.Errorf("second call ends with %v, want the tool result", last)
				}
				if tc.name == "tool then right number" && last["content"] != "36" {
					t.Errorf("tool result %v, want 36", last["content"])
				}
			}
		})
	}
}

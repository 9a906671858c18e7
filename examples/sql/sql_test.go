// Package sql holds the multi-agent text-to-SQL example: make_data.py (the
// shop database, tasks, demonstrations) and harness.py (writer, checker
// and rewriter on the Chat Completions API, each at its own base URL).
// These tests run both with python3 against a loopback server that
// answers in the Chat Completions wire format.
package sql

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/aglrl/agl/internal/testutil"
)

type task struct {
	ID       string `json:"id"`
	Question string `json:"question"`
	Gold     string `json:"gold"`
}

func makeData(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(testutil.Python(t), "make_data.py", dir, "--sft", "200")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make_data.py: %v\n%s", err, out)
	}
	return dir
}

// TestMakeData: held-out questions are asked by no training task and no
// demonstration, and each names a value the training tasks name (in the
// other template of its pair); every gold query runs and returns rows.
func TestMakeData(t *testing.T) {
	dir := makeData(t)
	train, val := testutil.ReadJSONL[task](t, filepath.Join(dir, "train.jsonl")), testutil.ReadJSONL[task](t, filepath.Join(dir, "val.jsonl"))
	if len(train) < 40 || len(val) < 40 {
		t.Fatalf("%d train, %d val tasks", len(train), len(val))
	}
	sft, err := os.ReadFile(filepath.Join(dir, "sft.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	value := func(id string) string { // "city-count-Oslo" → "Oslo"
		return id[strings.LastIndex(id, "-")+1:]
	}
	trainQ, trainV := map[string]bool{}, map[string]bool{}
	for _, x := range train {
		trainQ[x.Question], trainV[value(x.ID)] = true, true
	}
	for _, x := range val {
		q, _ := json.Marshal(x.Question)
		if trainQ[x.Question] || strings.Contains(string(sft), string(q)) {
			t.Errorf("val question %q is asked in training", x.Question)
		}
		if !trainV[value(x.ID)] {
			t.Errorf("val task %s names a value no training task names", x.ID)
		}
	}
	// Half the demonstration rounds ask about made-up values: the writer
	// and the rewriter copy a value into the query that no task, no other
	// kind of slot and no row of the database holds; the checker's
	// demonstrations name real values only.
	var demo struct {
		Messages []struct{ Role, Content string }
	}
	real := map[string]bool{}
	for _, x := range append(train, val...) {
		real[value(x.ID)] = true
	}
	quoted := regexp.MustCompile(`'([^']*)'`)
	madeUp := map[string]map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(sft)), "\n") {
		if err := json.Unmarshal([]byte(line), &demo); err != nil {
			t.Fatal(err)
		}
		system, user := demo.Messages[0].Content, demo.Messages[1].Content
		m := quoted.FindStringSubmatch(user)
		if m == nil {
			t.Fatalf("demonstration question without a quoted value: %q", user)
		}
		if madeUp[system] == nil {
			madeUp[system] = map[string]bool{}
		}
		if !real[m[1]] {
			madeUp[system][m[1]] = true
		}
		if reply := demo.Messages[2].Content; system != "Reply OK or WRONG." && !strings.Contains(reply, "'"+m[1]+"'") {
			t.Errorf("%q answers %q without its value %q", user, reply, m[1])
		}
	}
	for system, vals := range madeUp {
		n := len(vals)
		if system == "Reply OK or WRONG." && n > 0 || system != "Reply OK or WRONG." && n < 40 {
			t.Errorf("%d made-up values in the demonstrations of %q", n, system)
		}
	}
	py := `import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for line in open(sys.argv[2]):
    t = json.loads(line)
    rows = db.execute(t["gold"]).fetchall()
    assert rows and rows != [(None,)], t
`
	for _, f := range []string{"train.jsonl", "val.jsonl"} {
		if out, err := exec.Command(testutil.Python(t), "-c", py, filepath.Join(dir, "shop.db"), filepath.Join(dir, f)).CombinedOutput(); err != nil {
			t.Errorf("gold queries of %s: %v\n%s", f, err, out)
		}
	}
}

// TestHarness runs harness.py against a loopback server that answers each
// agent (told apart by its base URL's /agents/{agent}/ segment) from a
// script: the loop, the read-only database and the reward.
func TestHarness(t *testing.T) {
	dir := makeData(t)
	val := testutil.ReadJSONL[task](t, filepath.Join(dir, "val.jsonl"))
	var q task
	for _, x := range val {
		if strings.HasPrefix(x.ID, "city-") {
			q = x
		}
	}
	bad := strings.Replace(q.Gold, "FROM customers", "FROM customer", 1)
	tests := []struct {
		name   string
		script map[string][]string
		calls  string
		reward string
	}{
		{"writer right, checker agrees", map[string][]string{"writer": {q.Gold}, "checker": {"OK"}}, "writer,checker", "1.0"},
		{"rewriter fixes", map[string][]string{"writer": {bad}, "checker": {"WRONG", "OK"}, "rewriter": {q.Gold}}, "writer,checker,rewriter,checker", "1.0"},
		{"at most two rewrites", map[string][]string{"writer": {bad}, "checker": {"WRONG", "WRONG"}, "rewriter": {bad, bad}}, "writer,checker,rewriter,checker,rewriter", "0.0"},
		{"checker accepts a wrong query", map[string][]string{"writer": {bad}, "checker": {"OK"}}, "writer,checker", "0.0"},
		{"no writes", map[string][]string{"writer": {"DELETE FROM customers"}, "checker": {"WRONG"}, "rewriter": {q.Gold}, "": {"OK"}}, "writer,checker,rewriter,checker", "1.0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var calls []string
			used := map[string]int{}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				rest, ok := strings.CutPrefix(r.URL.Path, "/r/ro/at/agents/")
				agent, route, _ := strings.Cut(rest, "/")
				if !ok || route != "v1/chat/completions" || r.Header.Get("Authorization") != "Bearer key" {
					http.Error(w, `{"error":{"message":"bad route"}}`, 404)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				calls = append(calls, agent)
				replies := tc.script[agent]
				if agent == "checker" && used[agent] >= len(replies) {
					replies = tc.script[""] // the checker's replies after the script's
					used[agent] -= len(tc.script["checker"])
				}
				if used[agent] >= len(replies) {
					http.Error(w, `{"error":{"message":"unscripted"}}`, 500)
					return
				}
				reply := replies[used[agent]]
				used[agent]++
				b, _ := json.Marshal(map[string]any{"id": "c", "object": "chat.completion", "model": "agl",
					"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": reply}}}})
				w.Header().Set("Content-Type", "application/json")
				w.Write(b)
			}))
			defer srv.Close()
			taskJSON, _ := json.Marshal(q)
			cmd := exec.Command(testutil.Python(t), "harness.py")
			cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+srv.URL+"/r/ro/at/v1", "OPENAI_API_KEY=key",
				"SQL_DB="+filepath.Join(dir, "shop.db"), "AGL_TASK="+string(taskJSON))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("harness: %v\n%s", err, out)
			}
			if got := strings.TrimSpace(string(out)); got != tc.reward || strings.Join(calls, ",") != tc.calls {
				t.Errorf("reward %s after calls %v, want %s after %s", got, calls, tc.reward, tc.calls)
			}
		})
	}
	// The database is unchanged (the harness opens it read-only).
	py := fmt.Sprintf(`import sqlite3; print(sqlite3.connect(%q).execute("SELECT COUNT(*) FROM customers").fetchone()[0])`, filepath.Join(dir, "shop.db"))
	if out, err := exec.Command(testutil.Python(t), "-c", py).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "30" {
		t.Errorf("customers after the harness ran: %s %v", out, err)
	}
}

//go:build linux

// Package swe holds the coding-agent example: lib/ (a small Python library
// with unit tests), gen.py (SWE-smith-style repository tasks and
// demonstrations from it) and harness.py (a mini-swe-agent-style harness:
// one bash block per turn, run through AGL_SANDBOX_EXEC). These tests run
// gen.py with python3, and the harness through the real controller, the
// real bubblewrap sandbox and a real loopback gateway whose model is
// scripted.
package swe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/controller"
	"github.com/aglrl/agl/gateway"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/sandbox"
	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/sqlite"
)

// TestMain lets the test binary stand in for agl behind AGL_SANDBOX_EXEC
// (`agl sandbox exec`) and inside a sandbox (`agl sandbox forward`), as
// the controller tests do.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "sandbox" && os.Args[2] == "exec" {
		os.Exit(sandbox.ExecMain(context.Background(), os.Args[3:], os.Stdin, os.Stdout, os.Stderr))
	}
	if len(os.Args) > 2 && os.Args[1] == "sandbox" && os.Args[2] == "forward" {
		os.Exit(sandbox.ForwardMain(context.Background(), os.Args[3:], os.Stdin, os.Stdout, os.Stderr))
	}
	code := m.Run()
	if genRoot != "" {
		os.RemoveAll(genRoot)
	}
	os.Exit(code)
}

type task struct {
	ID               string   `json:"id"`
	Repo             string   `json:"repo"`
	ProblemStatement string   `json:"problem_statement"`
	TestCommand      string   `json:"test_command"`
	FailToPass       []string `json:"fail_to_pass"`
	PassToPass       []string `json:"pass_to_pass"`
	HiddenFiles      []string `json:"hidden_files"`
	MaxTurns         int      `json:"max_turns"`
}

type mutation struct {
	ID         string `json:"id"`
	File       string `json:"file"`
	Line       int    `json:"line"`
	Shown      string `json:"shown"`       // the operator the mutated line has
	OriginalOp string `json:"original_op"` // the one lib/ has
	Solution   *demo  `json:"solution"`
}

type demo struct {
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
}

var (
	genOnce sync.Once
	genRoot string // removed after the tests
	genDirs [2]string
	genErr  error
)

// generate runs gen.py twice (same seed) on two modules, once for all
// tests of the package; the second output is for the determinism check.
func generate(t *testing.T) string {
	t.Helper()
	py := testutil.Python(t)
	genOnce.Do(func() {
		root, err := os.MkdirTemp("", "swe-test-")
		if err != nil {
			genErr = err
			return
		}
		genRoot = root
		for i := range genDirs {
			genDirs[i] = filepath.Join(root, string(rune('a'+i)))
			cwd, _ := os.Getwd()
			out, err := exec.Command(py, "gen.py", genDirs[i], "--modules", "dates,mathx,money", "--val", "3",
				"--sites", "6", "--seed", "7", "--base", cwd).CombinedOutput()
			if err != nil {
				genErr = errors.New("gen.py: " + err.Error() + "\n" + string(out))
				return
			}
		}
	})
	if genErr != nil {
		t.Fatal(genErr)
	}
	return genDirs[0]
}

// TestGen: the generator is deterministic (byte-identical files and
// snapshots for one seed); train and val tasks are on disjoint lines;
// every task's FAIL_TO_PASS and PASS_TO_PASS split the module's tests with
// at least one failing; its snapshot differs from the library in exactly
// the line its statement names, by one operator swapped for its
// neighbour; its solution looks at that line and swaps it back; the
// demonstrations show every other operator of the kind at each site, none
// on a val line of lib/.
func TestGen(t *testing.T) {
	if testing.Short() {
		t.Skip("generates the task set twice and runs every module's tests (a minute)")
	}
	dir := generate(t)
	cwd, _ := os.Getwd()
	rel0, _ := filepath.Rel(cwd, genDirs[0])
	rel1, _ := filepath.Rel(cwd, genDirs[1])
	for _, name := range []string{"train.jsonl", "val.jsonl", "sft.jsonl", "mutations.jsonl", "heldout.jsonl"} {
		a, _ := os.ReadFile(filepath.Join(genDirs[0], name))
		b, _ := os.ReadFile(filepath.Join(genDirs[1], name))
		// the repo paths name the output directory
		if len(a) == 0 || string(a) != strings.ReplaceAll(string(b), rel1+"/", rel0+"/") {
			t.Errorf("%s: not deterministic or empty (%d, %d bytes)", name, len(a), len(b))
		}
	}
	train := testutil.ReadJSONL[task](t, filepath.Join(dir, "train.jsonl"))
	val := testutil.ReadJSONL[task](t, filepath.Join(dir, "val.jsonl"))
	if len(train) == 0 || len(val) != 3 { // --val 3
		t.Fatalf("%d train, %d val tasks", len(train), len(val))
	}
	muts := map[string]mutation{}
	for _, m := range testutil.ReadJSONL[mutation](t, filepath.Join(dir, "mutations.jsonl")) {
		muts[m.ID] = m
	}
	swap := map[string]string{"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "==", "+": "-", "-": "+"}
	statementRe := regexp.MustCompile(`^(test_\w+) fails\. The bug is on line (\d+) of (\w+\.py)\.$`)
	valLines := map[string]bool{}
	for _, x := range val {
		valLines[fmt.Sprintf("%s:%d", muts[x.ID].File, muts[x.ID].Line)] = true
	}
	for i, x := range append(train, val...) {
		m := muts[x.ID]
		mod := strings.TrimSuffix(m.File, ".py")
		if i < len(train) && valLines[fmt.Sprintf("%s:%d", m.File, m.Line)] {
			t.Errorf("train task %s is on a val line", x.ID)
		}
		if len(x.HiddenFiles) != 1 || x.HiddenFiles[0] != "test_"+mod+".py" || x.TestCommand != "python3 -m unittest -v {tests}" {
			t.Errorf("%s: hidden %v, test command %q", x.ID, x.HiddenFiles, x.TestCommand)
		}
		all := append(slices.Clone(x.FailToPass), x.PassToPass...)
		sort.Strings(all)
		if len(x.FailToPass) == 0 || !slices.Equal(all, moduleTests(t, mod)) {
			t.Errorf("%s: fail_to_pass %v + pass_to_pass %v, the module's tests %v", x.ID, x.FailToPass, x.PassToPass, moduleTests(t, mod))
		}
		// The statement names the first failing test and the mutated line.
		sm := statementRe.FindStringSubmatch(x.ProblemStatement)
		if sm == nil || !strings.HasSuffix(x.FailToPass[0], "."+sm[1]) || sm[2] != fmt.Sprint(m.Line) || sm[3] != m.File {
			t.Errorf("%s: problem statement %q, mutation %+v, fail_to_pass %v", x.ID, x.ProblemStatement, m, x.FailToPass)
		}
		orig, _ := os.ReadFile(filepath.Join("lib", m.File))
		mutant, err := os.ReadFile(filepath.Join(x.Repo, m.File))
		if err != nil {
			t.Fatal(err)
		}
		ol, ml := strings.Split(string(orig), "\n"), strings.Split(string(mutant), "\n")
		for i := range ol {
			if (ol[i] != ml[i]) != (i == m.Line-1) {
				t.Errorf("%s: line %d differs %v, the mutation is on line %d", x.ID, i+1, ol[i] != ml[i], m.Line)
			}
		}
		// One operator, swapped for its neighbour; the solution looks at the
		// line (the observation is the mutated line) and swaps it back.
		if swap[m.OriginalOp] != m.Shown || strings.Replace(ml[m.Line-1], m.Shown, m.OriginalOp, 1) != ol[m.Line-1] {
			t.Errorf("%s: %q shows %q for %q: not the swap %q", x.ID, ml[m.Line-1], m.Shown, m.OriginalOp, ol[m.Line-1])
		}
		want := []string{x.ProblemStatement, fmt.Sprintf("```bash\nsed -n '%dp' %s\n```", m.Line, m.File), ml[m.Line-1],
			fmt.Sprintf("```bash\nsed -i '%ds/%s/%s/' %s\n```", m.Line, m.Shown, m.OriginalOp, m.File), "(no output)", "```bash\nsubmit\n```"}
		if got := contents(m.Solution); !slices.Equal(got, want) {
			t.Errorf("%s: solution %q, want %q", x.ID, got, want)
		}
		b, _ := os.ReadFile(filepath.Join(genDirs[1], "repos", x.ID, m.File))
		if string(b) != string(mutant) {
			t.Errorf("%s: snapshot not deterministic", x.ID)
		}
	}
	// heldout.jsonl (for agl sft --eval) holds the val tasks' solutions, in order.
	var valSolutions []demo
	for _, x := range val {
		valSolutions = append(valSolutions, *muts[x.ID].Solution)
	}
	held := testutil.ReadJSONL[demo](t, filepath.Join(dir, "heldout.jsonl"))
	if !reflect.DeepEqual(held, valSolutions) {
		t.Errorf("heldout.jsonl has %d conversations, not the %d val solutions", len(held), len(valSolutions))
	}
	// Every demonstration looks at the line its statement names and
	// replaces the operator it shows; each site gets every other operator
	// of the kind once (so each replacement is of the operator's kind). Those on lib/ (no shift, the line as lib/ has it)
	// are off the val lines; most are on renamed copies.
	kinds := [][]string{{"<", "<=", ">", ">=", "==", "!="}, {"+", "-", "*"}}
	fixRe := regexp.MustCompile(`^` + "```bash\\nsed -i '(\\d+)s/([^/]+)/([^/]+)/' (\\w+\\.py)\\n```" + `$`)
	lib := map[string][]string{}
	sites := map[string][]string{} // file:line line shown-operator -> its replacements
	for i, d := range testutil.ReadJSONL[demo](t, filepath.Join(dir, "sft.jsonl")) {
		c := contents(&d)
		if len(c) != 6 {
			t.Fatalf("demonstration %d: %q", i, c)
		}
		sm := statementRe.FindStringSubmatch(c[0])
		fm := fixRe.FindStringSubmatch(c[3])
		if sm == nil || fm == nil || c[1] != fmt.Sprintf("```bash\nsed -n '%sp' %s\n```", sm[2], sm[3]) ||
			fm[1] != sm[2] || fm[4] != sm[3] || c[4] != "(no output)" || c[5] != "```bash\nsubmit\n```" {
			t.Fatalf("demonstration %d: %q", i, c)
		}
		if !strings.Contains(c[2], fm[2]) {
			t.Errorf("demonstration %d replaces %q, not in the line %q", i, fm[2], c[2])
		}
		if _, ok := lib[sm[3]]; !ok {
			b, err := os.ReadFile(filepath.Join("lib", sm[3]))
			if err != nil {
				t.Fatal(err)
			}
			lib[sm[3]] = strings.Split(string(b), "\n")
		}
		key := sm[3] + ":" + sm[2]
		if n, _ := strconv.Atoi(sm[2]); valLines[key] && n <= len(lib[sm[3]]) && strings.Replace(c[2], fm[2], swap[fm[2]], 1) == lib[sm[3]][n-1] {
			t.Errorf("demonstration %d is on lib/'s val line %s", i, key)
		}
		sites[key+" "+c[2]+" "+fm[2]] = append(sites[key+" "+c[2]+" "+fm[2]], fm[3])
	}
	for site, fixes := range sites {
		shown := site[strings.LastIndex(site, " ")+1:]
		var want []string
		for _, k := range kinds {
			if slices.Contains(k, shown) {
				want = slices.DeleteFunc(slices.Clone(k), func(o string) bool { return o == shown })
			}
		}
		slices.Sort(want)
		slices.Sort(fixes)
		if !slices.Equal(fixes, want) {
			t.Errorf("site %s: replacements %v, want every other operator of the kind once: %v", site, fixes, want)
		}
	}
	if len(sites) < 20 {
		t.Errorf("%d demonstrated sites", len(sites))
	}
}

// contents lists a conversation's messages after the system prompt.
func contents(d *demo) []string {
	if d == nil {
		return nil
	}
	var out []string
	for _, m := range d.Messages[1:] {
		out = append(out, m.Content)
	}
	return out
}

// moduleTests lists the test ids of lib/test_MOD.py as unittest prints them.
func moduleTests(t *testing.T, mod string) []string {
	cmd := exec.Command(testutil.Python(t), "-m", "unittest", "-v", "test_"+mod)
	cmd.Dir = "lib"
	out, _ := cmd.CombinedOutput()
	var ids []string
	for _, line := range strings.Split(string(out), "\n") {
		if i, j := strings.Index(line, " ("), strings.Index(line, ") ... "); i > 0 && j > i {
			ids = append(ids, line[i+2:j])
		}
	}
	sort.Strings(ids)
	return ids
}

// texts are assistant messages with these contents.
func texts(ss []string) []chat.Message {
	ms := make([]chat.Message, len(ss))
	for i, s := range ss {
		ms[i] = chat.Message{Role: chat.RoleAssistant, Content: s}
	}
	return ms
}

func rewardString(r *float64) string {
	if r == nil {
		return "none"
	}
	return fmt.Sprint(*r)
}

// TestHarnessInSandbox runs harness.py on a generated train task through
// the real controller and sandbox, with a scripted model behind a real
// gateway: replaying the task's solution resolves it (reward 1 from the
// hidden tests) and every observation the harness sends back is the one
// the solution recorded, as the demonstrations do (so the warm start
// trains on what the harness really shows); without the fix, or with
// replies that are not one bash block, the reward is 0.
func TestHarnessInSandbox(t *testing.T) {
	testutil.RequireBwrap(t)
	dir := generate(t)
	tk, dm := demoTask(t, dir)
	// look at the line, swap its operator back, submit
	replies := []string{dm.Messages[2].Content, dm.Messages[4].Content, dm.Messages[6].Content}
	noFix := slices.Clone(replies)
	noFix[1] = "```bash\necho " + "thinking" + "\n```"

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dataDir, kept := t.TempDir(), t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dataDir, "agl.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tmpl, err := chat.NewSmall()
	if err != nil {
		t.Fatal(err)
	}
	eng := &testutil.ScriptEngine{Tmpl: tmpl, ModelVersion: 1, Rendered: true}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	const admin = "admin-key-for-the-swe-test"
	gw := gateway.New(gateway.Options{Store: st, AdminKey: admin, Logger: quiet,
		LLM: proxy.New(proxy.Config{}, st, proxy.NewTokenBackend(eng, tmpl, tmpl.Tokenizer(), 0))})
	srv := httptest.NewServer(gw)
	defer srv.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cwd, _ := os.Getwd()
	cfg := controller.Config{GatewayURL: srv.URL, AdminKey: admin, Command: []string{testutil.Python(t), "harness.py"}, Dir: cwd,
		Env:               []string{"SWE_MAX_TOKENS=400"},
		HeartbeatInterval: 200 * time.Millisecond, PollInterval: 50 * time.Millisecond, KillGrace: time.Second, Logger: quiet, Agl: exe,
		// PYTHONDONTWRITEBYTECODE as in agl.yaml: a fix that keeps the line's
		// length (!= to ==), made in the second the reproduction cached the
		// module's bytecode, would otherwise run the stale bytecode.
		Sandbox: controller.SandboxConfig{Limits: sandbox.Limits{Timeout: 15 * time.Second, MemoryBytes: 256 << 20, Processes: 64,
			DiskBytes: 64 << 20, OutputBytes: 64 << 10}, Env: []string{"PYTHONDONTWRITEBYTECODE=1"}},
		Tests: controller.TestsConfig{Timeout: 60 * time.Second}}
	cfg.Sandbox.KeepWorkspaces = kept
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- controller.Run(cctx, cfg) }()
	defer func() { stop(); <-done }()

	taskJSON, _ := os.ReadFile(filepath.Join(dir, "train.jsonl"))
	var line string
	for _, l := range strings.Split(string(taskJSON), "\n") {
		if strings.Contains(l, `"id": "`+tk.ID+`"`) {
			line = l
		}
	}
	for _, tc := range []struct {
		name    string
		replies []string
		reward  float64
		check   func(t *testing.T, prompts []string)
	}{
		{"solution replayed", replies, 1, func(t *testing.T, prompts []string) {
			// what the harness showed after each command is what the
			// demonstrations record: the line, then no output
			for i, want := range []string{dm.Messages[3].Content, dm.Messages[5].Content} {
				if obs := strings.TrimPrefix(prompts[i+1], prompts[i]); !strings.Contains(obs, want) {
					t.Errorf("observation %d is not the solution's %q:\n%s", i+1, want, obs)
				}
			}
		}},
		{"no fix", noFix, 0, nil},
		{"not one bash block", []string{"I would fix it.", "```bash\nls\n```\n```bash\nls\n```", "```bash\nsubmit\n```"}, 0, func(t *testing.T, prompts []string) {
			if n := strings.Count(prompts[len(prompts)-1], "Format error: reply with exactly one ```bash block."); n != 2 {
				t.Errorf("%d format errors sent, want 2", n)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng.Script(texts(tc.replies)...)
			rs, err := st.CreateRollouts(ctx, []store.NewRollout{{Task: json.RawMessage(line), Mode: store.ModeVal,
				Config: store.RolloutConfig{TimeoutSeconds: 120}}})
			if err != nil {
				t.Fatal(err)
			}
			var r store.Rollout
			for {
				if r, err = st.GetRollout(ctx, rs[0].ID); err != nil {
					t.Fatal(err)
				}
				if r.Status.Terminal() {
					break
				}
				if ctx.Err() != nil {
					t.Fatal("rollout did not finish")
				}
				time.Sleep(100 * time.Millisecond)
			}
			evs, err := st.ListEvents(ctx, store.EventFilter{RolloutID: r.ID})
			if err != nil {
				t.Fatal(err)
			}
			var testsEv string
			for _, e := range evs {
				if e.Type == "tests" {
					testsEv = string(e.Data)
				}
			}
			if r.Reward == nil || *r.Reward != tc.reward {
				last := "(none)"
				if seen := eng.Prompts(); len(seen) > 0 {
					last = seen[len(seen)-1]
				}
				t.Fatalf("status %s reward %s, want %v (error %q; tests event %s; the model's last prompt:\n%s)",
					r.Status, rewardString(r.Reward), tc.reward, r.Error, testsEv, last)
			}
			prompts, left := eng.Prompts(), eng.Left()
			if left != 0 || len(prompts) != len(tc.replies) {
				t.Errorf("%d calls for %d scripted replies (%d left)", len(prompts), len(tc.replies), left)
			}
			if strings.Contains(prompts[0], "fail_to_pass") || strings.Contains(prompts[0], "test_command") {
				t.Errorf("the model saw the task's test fields: %s", prompts[0])
			}
			if tc.check != nil {
				tc.check(t, prompts)
			}
		})
	}
	// recheck.py re-tests the kept final workspaces of these three val
	// rollouts outside the sandbox that ran them: only the replayed
	// demonstration passes, as the stored rewards say.
	out, err := exec.CommandContext(ctx, testutil.Python(t), "recheck.py", dataDir, kept, "--base", cwd).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "3 tasks, resolved 1 (33.3%) by the stored rewards, 1 (33.3%) rechecked") ||
		strings.Contains(string(out), "recheck: ") {
		t.Errorf("recheck.py: %v\n%s", err, out)
	}
}

// TestHarnessRefusesUnsandboxed: without AGL_SANDBOX_EXEC the harness
// runs no command at all and says why.
func TestHarnessRefusesUnsandboxed(t *testing.T) {
	cmd := exec.Command(testutil.Python(t), "harness.py")
	cmd.Env = append(os.Environ(), "AGL_SANDBOX_EXEC=", "AGL_TASK={}", "OPENAI_BASE_URL=http://127.0.0.1:9/v1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "AGL_SANDBOX_EXEC is not set") {
		t.Fatalf("harness without a sandbox: %v\n%s", err, out)
	}
}

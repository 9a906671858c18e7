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
	"bufio"
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
	ID       string `json:"id"`
	File     string `json:"file"`
	Line     int    `json:"line"`
	Original string `json:"original"`
	Call     string `json:"call"`
	Solution *demo  `json:"solution"`
}

type demo struct {
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
}

func readJSONL[T any](t *testing.T, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, v)
	}
	return out
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
			out, err := exec.Command(py, "gen.py", genDirs[i], "--modules", "dates,strutil", "--val-modules", "1",
				"--per-module", "3", "--train-per-module", "3", "--variants", "2", "--variant-demos", "2", "--seed", "7", "--base", cwd).CombinedOutput()
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
// snapshots for one seed), train and val tasks come from disjoint modules,
// every task's FAIL_TO_PASS and PASS_TO_PASS split the module's tests with
// at least one failing, its snapshot differs from the library in exactly
// the mutated line, and the hidden files are the module's tests.
func TestGen(t *testing.T) {
	suggestion := regexp.MustCompile(`(?m)^(?:NameError|AttributeError): .*\. Did you mean: '(\w+)'\?$`)
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
	train := readJSONL[task](t, filepath.Join(dir, "train.jsonl"))
	val := readJSONL[task](t, filepath.Join(dir, "val.jsonl"))
	if len(train) == 0 || len(val) == 0 {
		t.Fatalf("%d train, %d val tasks", len(train), len(val))
	}
	muts := map[string]mutation{}
	for _, m := range readJSONL[mutation](t, filepath.Join(dir, "mutations.jsonl")) {
		muts[m.ID] = m
	}
	module := func(x task) string { return strings.TrimSuffix(strings.TrimPrefix(x.HiddenFiles[0], "test_"), ".py") }
	trainMods := map[string]bool{}
	for _, x := range train {
		trainMods[module(x)] = true
	}
	for _, x := range val {
		if trainMods[module(x)] {
			t.Errorf("val task %s is from train module %s", x.ID, module(x))
		}
	}
	for _, x := range append(train, val...) {
		mod := module(x)
		if len(x.HiddenFiles) != 1 || x.HiddenFiles[0] != "test_"+mod+".py" || x.TestCommand != "python3 -m unittest -v {tests}" {
			t.Errorf("%s: hidden %v, test command %q", x.ID, x.HiddenFiles, x.TestCommand)
		}
		all := append(slices.Clone(x.FailToPass), x.PassToPass...)
		sort.Strings(all)
		if len(x.FailToPass) == 0 || !slices.Equal(all, moduleTests(t, mod)) {
			t.Errorf("%s: fail_to_pass %v + pass_to_pass %v, the module's tests %v", x.ID, x.FailToPass, x.PassToPass, moduleTests(t, mod))
		}
		// The statement names the mutated line and suggests the name it misspells.
		m := muts[x.ID]
		frame := fmt.Sprintf("  File \"/workspace/%s\", line %d, in ", m.File, m.Line)
		sm := suggestion.FindStringSubmatch(x.ProblemStatement)
		if !strings.Contains(x.ProblemStatement, frame) || sm == nil || !regexp.MustCompile(`\b`+sm[1]+`\b`).MatchString(m.Original) {
			t.Errorf("%s: problem statement %q, mutation %+v", x.ID, x.ProblemStatement, m)
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
		b, _ := os.ReadFile(filepath.Join(genDirs[1], "repos", x.ID, m.File))
		if string(b) != string(mutant) {
			t.Errorf("%s: snapshot not deterministic", x.ID)
		}
	}
	// Every demonstration fixes the line its statement names with sed and
	// submits. Those on renamed variants (--variants 2) name a module lib/
	// does not have, none shows a val module's code, and those on lib/'s
	// train modules are on lines no train task mutates.
	libMods := map[string]bool{}
	valDefs := map[string]bool{}
	entries, err := os.ReadDir("lib")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range entries {
		if mod, ok := strings.CutSuffix(f.Name(), ".py"); ok && !strings.HasPrefix(mod, "test_") {
			libMods[mod] = true
		}
	}
	for _, x := range val {
		src, err := os.ReadFile(filepath.Join("lib", module(x)+".py"))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(src), "\n") {
			if name, ok := strings.CutPrefix(line, "def "); ok {
				valDefs[name[:strings.Index(name, "(")]] = true
			}
		}
	}
	if len(valDefs) == 0 {
		t.Fatal("no val functions found")
	}
	taskLines := map[string]bool{}
	for _, x := range train {
		taskLines[fmt.Sprintf("%s:%d", muts[x.ID].File, muts[x.ID].Line)] = true
	}
	// heldout.jsonl (for agl sft --eval) holds the val tasks' solutions, in order.
	var valSolutions []demo
	for _, x := range val {
		if s := muts[x.ID].Solution; s != nil {
			valSolutions = append(valSolutions, *s)
		}
	}
	held := readJSONL[demo](t, filepath.Join(dir, "heldout.jsonl"))
	if len(valSolutions) == 0 || !reflect.DeepEqual(held, valSolutions) {
		t.Errorf("heldout.jsonl has %d conversations, not the %d val solutions", len(held), len(valSolutions))
	}
	frameRe := regexp.MustCompile(`File "/workspace/(\w+)\.py", line (\d+), in `)
	variants, perVariant := 0, map[string]int{}
	for i, d := range readJSONL[demo](t, filepath.Join(dir, "sft.jsonl")) {
		if len(d.Messages) != 5 || d.Messages[4].Content != "```bash\nsubmit\n```" {
			t.Fatalf("demonstration %d: %d messages, ends %q", i, len(d.Messages), d.Messages[len(d.Messages)-1].Content)
		}
		st := d.Messages[1].Content
		f, sm := frameRe.FindStringSubmatch(st), suggestion.FindStringSubmatch(st)
		if f == nil || sm == nil {
			t.Fatalf("demonstration %d: statement %q", i, st)
		}
		fix := fmt.Sprintf("```bash\nsed -i '%ss/", f[2])
		if !strings.HasPrefix(d.Messages[2].Content, fix) || !strings.HasSuffix(d.Messages[2].Content, "/"+sm[1]+"/' "+f[1]+".py\n```") {
			t.Errorf("demonstration %d: fix %q for %q", i, d.Messages[2].Content, st)
		}
		if !libMods[f[1]] {
			variants++
			perVariant[f[1]]++
		} else if taskLines[f[1]+".py:"+f[2]] {
			t.Errorf("demonstration %d fixes line %s of %s.py, a train task's line", i, f[2], f[1])
		}
		for _, m := range d.Messages {
			for name := range valDefs {
				if strings.Contains(m.Content, name+"(") {
					t.Errorf("demonstration %d shows the val function %s: %q", i, name, m.Content)
				}
			}
		}
	}
	if variants == 0 {
		t.Error("no demonstration on a renamed variant")
	}
	for mod, n := range perVariant {
		if n > 2 { // --variant-demos 2
			t.Errorf("variant %s has %d demonstrations, want at most 2", mod, n)
		}
	}
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
// gateway: replaying the task's demonstration resolves it (reward 1 from
// the hidden tests) and every observation the harness sends back is the
// one the demonstration recorded (so the warm start trains on what the
// harness really shows); without the fix, or with replies that are not
// one bash block, the reward is 0.
func TestHarnessInSandbox(t *testing.T) {
	testutil.RequireBwrap(t)
	dir := generate(t)
	tk, dm := demoTask(t, dir)
	m := muts(t, dir)[tk.ID]
	// The task's call, run first: the sandbox's python3 prints the very
	// traceback the statement quotes (gen.py printed it in-process).
	call := fmt.Sprintf("```bash\npython3 -c 'from %s import *; print(%s)'\n```", strings.TrimSuffix(m.File, ".py"), m.Call)
	replies := []string{call, dm.Messages[2].Content, dm.Messages[4].Content}
	quoted := strings.SplitN(tk.ProblemStatement, "\n", 2)[1]
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
		{"demonstration replayed", replies, 1, func(t *testing.T, prompts []string) {
			// the statement leaves out the code lines (and the ^^^ under them)
			obs := regexp.MustCompile(`(?m)^    .*\n`).ReplaceAllString(strings.TrimPrefix(prompts[1], prompts[0]), "")
			if !strings.Contains(obs, quoted+"\n(exit 1)") {
				t.Errorf("the call's observation does not end with the statement's traceback %q:\n%s", quoted, obs)
			}
			if obs := strings.TrimPrefix(prompts[2], prompts[1]); !strings.Contains(obs, dm.Messages[3].Content) {
				t.Errorf("the fix's observation is not the demonstration's %q:\n%s", dm.Messages[3].Content, obs)
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

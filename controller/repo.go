package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aglrl/agl/sandbox"
	"github.com/aglrl/agl/store"
)

// RepoTask is a repository task: a task JSON object with a "repo" field.
// The harness sees it without the fields that would give the tests away
// (RepoTask.harnessView).
type RepoTask struct {
	ID               string `json:"id"`
	Repo             string `json:"repo"`
	ProblemStatement string `json:"problem_statement"`
	// TestCommand runs with `sh -c` in the sandbox, cwd = the workspace;
	// "{tests}" becomes the shell-quoted ids of FailToPass+PassToPass.
	// With TestsUnittest it runs `python3 -m unittest` (the controller's
	// verdict runner runs in its place); with TestsGo, `go test -json`.
	TestCommand string `json:"test_command"`
	// TestFormat says how the verdict is read: TestsUnittest (default)
	// or TestsGo.
	TestFormat  string   `json:"test_format"`
	FailToPass  []string `json:"fail_to_pass"`
	PassToPass  []string `json:"pass_to_pass"`
	HiddenFiles []string `json:"hidden_files"`
	// SetupCommand, if set, runs in the sandbox before the harness.
	SetupCommand   string  `json:"setup_command"`
	MaxTurns       int     `json:"max_turns"`
	TimeoutSeconds float64 `json:"timeout_seconds"`
}

// secretTaskFields are the task fields a harness never sees.
var secretTaskFields = []string{"repo", "test_command", "test_format", "fail_to_pass", "pass_to_pass", "hidden_files"}

// ParseRepoTask returns the repository task in raw, or nil when raw is not
// one (not an object, or no "repo"); a repository task with bad fields is
// an error naming the field.
func ParseRepoTask(raw json.RawMessage) (*RepoTask, error) {
	var probe map[string]json.RawMessage
	if json.Unmarshal(raw, &probe) != nil || probe["repo"] == nil {
		return nil, nil
	}
	var t RepoTask
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("repository task: %w", err)
	}
	switch {
	case t.Repo == "":
		return nil, errors.New("repository task: repo is empty")
	case strings.TrimSpace(t.TestCommand) == "":
		return nil, errors.New("repository task: test_command is required")
	case len(t.FailToPass)+len(t.PassToPass) == 0:
		return nil, errors.New("repository task: fail_to_pass and pass_to_pass are both empty: nothing decides the reward")
	}
	if t.TestFormat == "" {
		t.TestFormat = TestsUnittest
	}
	switch {
	case t.TestFormat != TestsUnittest && t.TestFormat != TestsGo:
		return nil, fmt.Errorf("repository task: test_format %q: want %s or %s", t.TestFormat, TestsUnittest, TestsGo)
	case t.TestFormat == TestsUnittest && !unittestModule.MatchString(t.TestCommand):
		return nil, fmt.Errorf("repository task: test_command %q: test_format unittest runs `python3 -m unittest` (the verdict runner runs in its place)", t.TestCommand)
	case t.TestFormat == TestsGo && (!strings.Contains(t.TestCommand, "-json") || !goTestCommand.MatchString(t.TestCommand)):
		return nil, fmt.Errorf("repository task: test_command %q: test_format gotest runs `go test -json` (the test binaries run through the verdict runner)", t.TestCommand)
	}
	h, err := sandbox.CheckHidden(t.HiddenFiles)
	if err != nil {
		return nil, fmt.Errorf("repository task: %w", err)
	}
	t.HiddenFiles = h
	return &t, nil
}

// harnessView is the task JSON the harness gets: raw without
// secretTaskFields.
func harnessView(raw json.RawMessage) (string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", err
	}
	for _, k := range secretTaskFields {
		delete(m, k)
	}
	b, err := json.Marshal(m)
	return string(b), err
}

// Harness shapes (SandboxConfig.Harness).
const (
	// HarnessOutside: the harness runs on the host and runs the model's
	// commands with AGL_SANDBOX_EXEC.
	HarnessOutside = "outside"
	// HarnessInside: the whole harness command runs in the sandbox, with
	// only its attempt's gateway routes reachable.
	HarnessInside = "inside"
)

// SandboxConfig configures repository tasks' sandboxes.
type SandboxConfig struct {
	// Harness is HarnessOutside (default) or HarnessInside.
	Harness string `yaml:"harness"`
	// Limits bound every command (and, with HarnessInside, the harness;
	// its timeout is then the attempt's).
	sandbox.Limits `yaml:",inline"`
	// ReadOnly lists extra host paths bound read-only (an interpreter
	// outside /usr, a CLI's install dir).
	ReadOnly []string `yaml:"read_only"`
	// Env is added to the sandbox's environment (KEY=VALUE).
	Env []string `yaml:"-"`
	// KeepWorkspaces, if set, is a directory each final workspace is
	// copied to (as ROLLOUT-ATTEMPT) before it is removed.
	KeepWorkspaces string `yaml:"keep_workspaces"`
	// Bwrap is the bubblewrap executable (default: bwrap in PATH).
	Bwrap string `yaml:"bwrap"`
	// HarnessOutputBytes bounds how much of the harness's stdout and of
	// its stderr, each, reaches the attempt's log files on the host,
	// inside or outside the sandbox; the rest is read and dropped, and
	// counted in the sandbox event (default 64 MiB).
	HarnessOutputBytes int64 `yaml:"harness_output_bytes"`
	// DoorConns and DoorRequests bound, with HarnessInside, one attempt's
	// open connections to its gateway door (default 64) and its requests
	// in flight through it (default 16); more are refused at once (the
	// connection closed; 429). DoorUpstreamConns bounds the connections
	// all doors of the controller hold to the gateway (default 256), so
	// that sandboxes never fill the gateway's per-IP connection cap
	// (gateway.max_conns_per_ip) the controller's own requests share.
	DoorConns         int `yaml:"door_conns"`
	DoorRequests      int `yaml:"door_requests"`
	DoorUpstreamConns int `yaml:"door_upstream_conns"`
}

// TestsConfig configures the test-based reward of repository tasks.
type TestsConfig struct {
	// Timeout bounds the test command (default 300s).
	Timeout time.Duration `yaml:"timeout"`
	// PartialCredit: the reward is the fraction of fail_to_pass tests that
	// pass (0 if any pass_to_pass test fails) instead of 1 or 0.
	PartialCredit bool `yaml:"partial_credit"`
	// LogTailBytes is how much of the test output the tests event keeps
	// (default 8192).
	LogTailBytes int `yaml:"log_tail_bytes"`
	// CopyTimeout bounds the copy of the final workspace before the tests
	// (default 60s); CopyMaxFiles bounds its files and directories
	// (default 100000). Its size is bounded by sandbox.disk_bytes. A
	// workspace past a bound is not tested: reward 0, and the tests event
	// says which bound.
	CopyTimeout  time.Duration `yaml:"copy_timeout"`
	CopyMaxFiles int           `yaml:"copy_max_files"`
}

// repoAttempt is the repository side of one attempt.
type repoAttempt struct {
	task     *RepoTask
	ws       string // the workspace
	mounted  bool   // ws is a tmpfs of the disk limit
	kept     bool   // the final workspace was copied to keep_workspaces
	pristine string // the hidden files, as in the snapshot
	spec     sandbox.Spec
	exec     string       // AGL_SANDBOX_EXEC
	door     *gatewayDoor // harness inside: its way to the gateway
	// harnessJournal is where `agl sandbox exec` records how the inside
	// harness ended (its output's size among it).
	harnessJournal string
	// doorRefused counts what the door refused over its caps.
	doorRefused doorCounts
	// output copies the outside harness's output into its log files,
	// bounded.
	output *harnessOutput
	// top holds the workspace's top-level names as prepared (hidden
	// ones included).
	top map[string]bool
}

// prepareRepo sets up a repository task's workspace, sandbox spec and
// AGL_SANDBOX_EXEC, runs its setup command and fixes the harness's
// environment; a task that is not a repository task is left alone.
func (c *runner) prepareRepo(ctx context.Context, a *attempt) error {
	t, err := ParseRepoTask(a.claim.Rollout.Task)
	if err != nil || t == nil {
		return err
	}
	r := &repoAttempt{task: t, ws: filepath.Join(a.dir, "workspace"), pristine: filepath.Join(a.dir, "hidden")}
	a.repo = r
	if err := os.Mkdir(r.ws, 0o755); err != nil {
		return err
	}
	lim := c.cfg.Sandbox.Limits.WithDefaults()
	r.mounted = sandbox.MountWorkspace(r.ws, lim.DiskBytes)
	src := t.Repo
	if !filepath.IsAbs(src) {
		src = filepath.Join(c.cfg.Dir, src)
	}
	if err := sandbox.Prepare(src, r.ws, r.pristine, t.HiddenFiles); err != nil {
		return err
	}
	r.top = map[string]bool{}
	for _, d := range []string{r.ws, r.pristine} {
		des, _ := os.ReadDir(d)
		for _, de := range des {
			r.top[de.Name()] = true
		}
	}
	r.spec = sandbox.Spec{Workspace: r.ws, ReadOnly: c.cfg.Sandbox.ReadOnly, Env: c.cfg.Sandbox.Env, Limits: lim, Journal: filepath.Join(a.dir, "sandbox.journal"), Bwrap: c.cfg.Sandbox.Bwrap,
		// The controller's sweep tells the attempt's processes by this.
		// Its host-side processes are live (never a sweep's victim, even
		// as a zombie whose environment reads empty) until waited for.
		HostEnv: []string{"AGL_ATTEMPT_ID=" + a.aid}, Start: procs.start, Waited: procs.remove}
	specPath := filepath.Join(a.dir, "sandbox.json")
	if err := r.spec.Save(specPath); err != nil {
		return err
	}
	r.exec = filepath.Join(a.dir, "sandbox-exec")
	script := "#!/bin/sh\nexec " + shellQuote(c.cfg.Agl) + " sandbox exec --spec " + shellQuote(specPath) + " -- \"$@\"\n"
	if err := os.WriteFile(r.exec, []byte(script), 0o700); err != nil {
		return err
	}
	if t.SetupCommand != "" {
		var out tailBuffer
		out.max = c.cfg.LogTailBytes
		setup := r.spec
		setup.Journal = "" // not one of the model's commands
		res, err := sandbox.Run(ctx, setup, []string{"sh", "-c", t.SetupCommand}, nil, &out, &out)
		if err != nil {
			return fmt.Errorf("setup_command: %w", err)
		}
		if res.Exit != 0 {
			return fmt.Errorf("setup_command: exit status %d: %s", res.Exit, lastLine(out.String()))
		}
	}
	view, err := harnessView(a.claim.Rollout.Task)
	if err != nil {
		return err
	}
	for i, kv := range a.env {
		if strings.HasPrefix(kv, "AGL_TASK=") {
			a.env[i] = "AGL_TASK=" + view
		}
	}
	if c.cfg.Sandbox.Harness == HarnessOutside {
		a.env = append(a.env, "AGL_SANDBOX_EXEC="+r.exec)
	}
	return nil
}

// keepWorkspace copies a repository task's final workspace to
// sandbox.keep_workspaces/ROLLOUT-ATTEMPT, if configured (once the harness
// has ended, before the attempt completes).
func (c *runner) keepWorkspace(a *attempt) {
	r := a.repo
	keep := c.cfg.Sandbox.KeepWorkspaces
	if r == nil || keep == "" || r.kept {
		return
	}
	r.kept = true
	dst := filepath.Join(keep, a.rid+"-"+a.aid)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		a.log.Warn("controller: keep workspace", "err", err)
	} else if err := sandbox.CopyWorkspace(context.Background(), r.ws, dst, nil, c.copyBounds(r)); err != nil {
		a.log.Warn("controller: keep workspace", "err", err)
	}
}

// copyBounds bound a copy of the final workspace.
func (c *runner) copyBounds(r *repoAttempt) sandbox.CopyBounds {
	return sandbox.CopyBounds{MaxBytes: r.spec.Limits.DiskBytes, MaxFiles: c.cfg.Tests.CopyMaxFiles, Timeout: c.cfg.Tests.CopyTimeout}
}

// cleanupRepo keeps the final workspace if configured and not yet kept,
// then unmounts it (the attempt's dir is removed after).
func (c *runner) cleanupRepo(a *attempt) {
	r := a.repo
	if r == nil {
		return
	}
	r.closeDoor()
	c.keepWorkspace(a)
	if r.mounted {
		if err := sandbox.Unmount(r.ws); err != nil {
			a.log.Warn("controller: remove workspace", "err", err)
		}
	}
}

// Test formats (RepoTask.TestFormat).
const (
	// TestsUnittest: Python unittest ids (module.Class.name), run by the
	// controller's verdict runner in place of `python3 -m unittest`.
	TestsUnittest = "unittest"
	// TestsGo: `go test -json`, ids "importpath.TestName".
	TestsGo = "gotest"
)

// testsData is the data of a tests event.
type testsData struct {
	Reward   float64 `json:"reward"`
	Resolved bool    `json:"resolved"`
	// Reason says why the reward is not 1 ("" when it is).
	Reason        string            `json:"reason,omitempty"`
	PartialCredit bool              `json:"partial_credit,omitempty"`
	FailToPass    map[string]string `json:"fail_to_pass"`
	PassToPass    map[string]string `json:"pass_to_pass"`
	Exit          int               `json:"exit"`
	TimedOut      bool              `json:"timed_out,omitempty"`
	Duration      float64           `json:"duration_s"`
	// HiddenFilesChanged lists hidden paths the agent's workspace held at
	// the end (made or changed by the agent; replaced before the run).
	HiddenFilesChanged []string `json:"hidden_files_changed,omitempty"`
	// Shadowing lists top-level paths the agent added under the name of a
	// standard-library, test-runner or hidden test module (any importable
	// suffix: a package, .py, .pyc, a compiled .so); they were left out of
	// the test run.
	Shadowing []string `json:"shadowing,omitempty"`
	// Untrusted says why the test run's verdict cannot be trusted (no
	// report from the runner, a report not its own, tampering, an exit
	// status that disagrees with the report, a build failure): reward 0.
	Untrusted string `json:"untrusted,omitempty"`
	// Tamper lists what the runner found replaced in its process.
	Tamper []string `json:"tamper,omitempty"`
	// Refused names the bound (size, files, time: sandbox.CopyLimit…)
	// past which the final workspace was not copied, so not tested; "copy"
	// when the copy failed otherwise (the reason says how).
	Refused  string `json:"refused,omitempty"`
	Log      string `json:"log"`
	LogBytes int64  `json:"log_bytes"`
}

// Test statuses in a tests event.
const (
	testPassed  = "passed"
	testFailed  = "failed"
	testError   = "error"
	testSkipped = "skipped"
	testMissing = "missing"
)

// sandboxData is the data of a sandbox event: what the harness's sandboxed
// commands did, and which limits stopped them.
type sandboxData struct {
	Commands int `json:"commands"`
	// Limited counts the commands that hit each limit (timeout, output,
	// memory, processes, disk).
	Limited map[string]int `json:"limited,omitempty"`
	// Blocked counts the commands whose output shows the sandbox refused
	// something (network, git: no history, read_only: the system).
	Blocked map[string]int `json:"blocked,omitempty"`
	// Cgroups is false when memory and processes were bounded by rlimits.
	Cgroups bool `json:"cgroups"`
	// DiskLimit is false when the workspace could not be a tmpfs (not
	// root): its disk use was then unbounded.
	DiskLimit bool `json:"disk_limit"`
	// Harness is the shape: outside or inside.
	Harness string `json:"harness"`
	// HarnessOutputBytes is what the harness (either shape) wrote to
	// stdout and stderr; HarnessOutputCut, how much of it was dropped at
	// sandbox.harness_output_bytes instead of reaching the host.
	HarnessOutputBytes int64 `json:"harness_output_bytes,omitempty"`
	HarnessOutputCut   int64 `json:"harness_output_cut_bytes,omitempty"`
	// DoorRefusedConns, DoorRefusedRequests count what the gateway door
	// refused over sandbox.door_conns and sandbox.door_requests.
	DoorRefusedConns    int64 `json:"door_refused_conns,omitempty"`
	DoorRefusedRequests int64 `json:"door_refused_requests,omitempty"`
}

// recordSandbox appends the sandbox event from the attempt's journal.
func (c *runner) recordSandbox(ctx context.Context, a *attempt) {
	rs, err := sandbox.ReadJournal(a.repo.spec.Journal)
	if err != nil {
		a.log.Warn("controller: read the sandbox journal", "err", err)
	}
	d := sandboxData{Commands: len(rs), Cgroups: true, DiskLimit: a.repo.mounted, Harness: c.cfg.Sandbox.Harness}
	for _, r := range rs {
		d.Cgroups = d.Cgroups && r.Cgroups
		for _, l := range r.Limited() {
			if d.Limited == nil {
				d.Limited = map[string]int{}
			}
			d.Limited[l]++
		}
		for _, b := range r.Blocked {
			if d.Blocked == nil {
				d.Blocked = map[string]int{}
			}
			d.Blocked[b]++
		}
	}
	d.DoorRefusedConns, d.DoorRefusedRequests = a.repo.doorRefused.conns.Load(), a.repo.doorRefused.requests.Load()
	if o := a.repo.output; o != nil {
		d.HarnessOutputBytes, d.HarnessOutputCut = o.bytes.Load(), o.cut.Load()
	}
	if a.repo.harnessJournal != "" {
		hs, err := sandbox.ReadJournal(a.repo.harnessJournal)
		if err != nil {
			a.log.Warn("controller: read the harness's sandbox journal", "err", err)
		}
		for _, h := range hs {
			d.HarnessOutputBytes += h.StdoutBytes + h.StderrBytes
			d.HarnessOutputCut += h.CutBytes
		}
	}
	b, _ := json.Marshal(d)
	if err := c.append(ctx, a, store.NewEvent{Type: store.EventSandbox, Data: b}); err != nil {
		a.log.Warn("controller: append the sandbox event", "err", err)
	}
}

// testsReward is a repository task's reward: the final workspace with the
// pristine hidden files, tested in a fresh sandbox. The tests event and
// the reward (source evaluator) are appended.
func (c *runner) testsReward(ctx context.Context, a *attempt) error {
	c.recordSandbox(ctx, a)
	d, err := c.runTests(ctx, a)
	if err != nil {
		return err
	}
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	reward, _ := json.Marshal(map[string]any{"value": d.Reward, "source": store.SourceEvaluator})
	return c.append(ctx, a, store.NewEvent{Type: store.EventTests, Data: b}, store.NewEvent{Type: store.EventReward, Data: reward})
}

func (c *runner) runTests(ctx context.Context, a *attempt) (testsData, error) {
	r, t := a.repo, a.repo.task
	d := testsData{PartialCredit: c.cfg.Tests.PartialCredit}
	dir := filepath.Join(a.dir, "eval")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return d, err
	}
	lim := r.spec.Limits
	// Room for a full workspace and the hidden files.
	if sandbox.MountWorkspace(dir, 2*lim.DiskBytes) {
		defer sandbox.Unmount(dir)
	}
	// A module the agent added at the top level under a standard-library
	// or test-runner name (unittest/, re.py, re.cpython-311-….so), or under
	// a hidden test module's name (test_calc/ beside a hidden
	// test_calc.py), would be imported in place of the real one: it is
	// left out. Names the repository itself has are kept (its own
	// types.py).
	// Bytecode the agent's runs cached is left out too: a fix that keeps a
	// file's size, made within the second its bytecode was written, would
	// run the stale bytecode (Python checks a source's size and whole-second
	// mtime); the tests compile the sources as they are.
	py := c.python()
	hiddenMods := map[string]bool{}
	for _, h := range t.HiddenFiles {
		top, _, _ := strings.Cut(h, "/")
		hiddenMods[py.module(top)] = true
	}
	skip := func(rel string) bool {
		if path.Base(rel) == "__pycache__" {
			return true
		}
		if strings.Contains(rel, "/") || r.top[rel] || sandbox.IsHidden(rel, t.HiddenFiles) {
			return false
		}
		if name := py.module(rel); py.stdlib[name] || hiddenMods[name] {
			d.Shadowing = append(d.Shadowing, rel)
			return true
		}
		return false
	}
	err := sandbox.CopyWorkspace(ctx, r.ws, dir, skip, c.copyBounds(r))
	slices.Sort(d.Shadowing)
	if err != nil {
		// Whatever stopped the copy (a bound, a path too long, too many
		// entries), the agent's workspace is not tested: reward 0, never
		// a failed attempt that would earn a retry.
		var le *sandbox.CopyLimitError
		d.Refused = "copy"
		if errors.As(err, &le) {
			d.Refused = le.Limit
		}
		d.Reason = "the final workspace was not tested: " + truncate(err.Error(), 1024)
		return d, nil
	}
	changed, err := sandbox.RestoreHidden(r.pristine, dir, t.HiddenFiles)
	if err != nil {
		return d, fmt.Errorf("tests: restore the hidden files: %w", err)
	}
	d.HiddenFilesChanged = changed
	ids := append(append([]string(nil), t.FailToPass...), t.PassToPass...)
	quoted := make([]string, len(ids))
	for i, id := range ids {
		quoted[i] = shellQuote(id)
	}
	command := strings.ReplaceAll(t.TestCommand, "{tests}", strings.Join(quoted, " "))
	lim.Timeout = c.cfg.Tests.Timeout
	lim.CPUSeconds = 0
	lim = lim.WithDefaults()
	lim.OutputBytes = 64 << 20
	spec := sandbox.Spec{Workspace: dir, ReadOnly: r.spec.ReadOnly, Env: r.spec.Env, Limits: lim, Bwrap: r.spec.Bwrap, HostEnv: r.spec.HostEnv, Start: r.spec.Start}
	// The output is streamed: the log keeps its tail, go test's events
	// are read as they come.
	log := &tailBuffer{max: c.cfg.Tests.LogTailBytes}
	var stdout io.Writer = log
	var stdin io.Reader
	var key verdictKey
	var events *goStream
	if key, err = newVerdictKey(); err != nil {
		return d, err
	}
	if t.TestFormat == TestsGo {
		// go builds the test binaries with a verdict test holding the key;
		// its source is removed before any binary runs.
		generated, err := writeGoVerdictTests(dir, key.hex())
		if err != nil {
			d.Untrusted = "untrusted verdict: " + truncate(err.Error(), 1024)
			d.Reason = d.Untrusted
			return d, nil
		}
		script, err := writeRunner(filepath.Join(a.dir, "verdict"), "verdict_gotest.sh", gotestRunner)
		if err != nil {
			return d, err
		}
		spec.ReadOnly = append(slices.Clone(spec.ReadOnly), filepath.Dir(script))
		command = gotestCommand(command, script, generated)
		events = newGoStream(key.hex())
		stdout = io.MultiWriter(log, events)
	} else {
		runner, err := writeRunner(filepath.Join(a.dir, "verdict"), "verdict_runner.py", verdictRunner)
		if err != nil {
			return d, err
		}
		// The runner and the hidden tests are bound read-only; the runner
		// reads its key on stdin before any workspace code runs.
		spec.ReadOnly = append(slices.Clone(spec.ReadOnly), filepath.Dir(runner), r.pristine)
		command = unittestModule.ReplaceAllString(command, "${1}-I "+strings.ReplaceAll(shellQuote(runner), "$", "$$")+"${2}")
		stdin = bytes.NewReader(key.secret(path.Join(sandbox.Mount, key.report), r.pristine))
	}
	res, err := sandbox.Run(ctx, spec, []string{"sh", "-c", command}, stdin, stdout, log)
	if events != nil {
		events.close()
	}
	if err != nil {
		return d, fmt.Errorf("tests: %w", err)
	}
	d.Exit, d.TimedOut, d.Duration, d.LogBytes = res.Exit, res.TimedOut, res.Duration, res.StdoutBytes+res.StderrBytes
	d.Log = a.redact(runeStart(log.String()))
	if events != nil {
		d.FailToPass, d.PassToPass = goStatuses(events.statuses, t.FailToPass), goStatuses(events.statuses, t.PassToPass)
		d.Untrusted = goVerdict(events, res.Exit, ids)
	} else {
		var st map[string]string
		report, err := readReport(filepath.Join(dir, key.report))
		if err != nil {
			d.Untrusted = "untrusted verdict: " + err.Error()
		} else {
			st, d.Tamper, d.Untrusted = unittestVerdict(report, key.key, res.Exit, ids)
		}
		d.FailToPass, d.PassToPass = statuses(st, t.FailToPass), statuses(st, t.PassToPass)
	}
	d.Reward, d.Reason = score(d.FailToPass, d.PassToPass, c.cfg.Tests.PartialCredit)
	if d.Untrusted != "" {
		d.Reward, d.Reason = 0, d.Untrusted
	}
	if res.TimedOut {
		d.Reward = 0
		d.Reason = fmt.Sprintf("tests timed out after %s", lim.Timeout)
	}
	d.Resolved = d.Reason == ""
	return d, nil
}

func statuses(st map[string]string, ids []string) map[string]string {
	m := make(map[string]string, len(ids))
	for _, id := range ids {
		s, ok := st[id]
		if !ok {
			s = testMissing
		}
		m[id] = s
	}
	return m
}

// score is the reward: 1 when every test passed, else 0; with partial
// credit the fraction of fail_to_pass tests passed (1 when there are
// none), 0 when any pass_to_pass test did not pass. The reason names
// the first tests that did not pass.
func score(f2p, p2p map[string]string, partial bool) (float64, string) {
	var bad []string
	passed := 0
	for _, m := range []map[string]string{f2p, p2p} {
		for _, id := range sortedKeys(m) {
			if m[id] == testPassed {
				passed++
			} else {
				bad = append(bad, id+" "+m[id])
			}
		}
	}
	if len(bad) == 0 {
		return 1, ""
	}
	reason := "not passing: " + strings.Join(bad[:min(len(bad), 5)], ", ")
	if len(bad) > 5 {
		reason += fmt.Sprintf(" and %d more", len(bad)-5)
	}
	if !partial {
		return 0, reason
	}
	for _, s := range p2p {
		if s != testPassed {
			return 0, reason
		}
	}
	n := 0
	for _, s := range f2p {
		if s == testPassed {
			n++
		}
	}
	return float64(n) / float64(len(f2p)), reason
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// repoDefaults checks and fills the repository-task settings.
func (c Config) repoDefaults() (Config, error) {
	switch c.Sandbox.Harness {
	case "":
		c.Sandbox.Harness = HarnessOutside
	case HarnessOutside, HarnessInside:
	default:
		return c, fmt.Errorf("controller: sandbox.harness %q: want %s or %s", c.Sandbox.Harness, HarnessOutside, HarnessInside)
	}
	for _, p := range c.Sandbox.ReadOnly {
		if !filepath.IsAbs(p) {
			return c, fmt.Errorf("controller: sandbox.read_only %q: want an absolute path", p)
		}
	}
	c.Sandbox.Limits = c.Sandbox.Limits.WithDefaults()
	if c.Sandbox.HarnessOutputBytes <= 0 {
		c.Sandbox.HarnessOutputBytes = 64 << 20
	}
	if c.Sandbox.DoorConns <= 0 {
		c.Sandbox.DoorConns = 64
	}
	if c.Sandbox.DoorRequests <= 0 {
		c.Sandbox.DoorRequests = 16
	}
	if c.Sandbox.DoorUpstreamConns <= 0 {
		c.Sandbox.DoorUpstreamConns = 256
	}
	if c.Tests.Timeout <= 0 {
		c.Tests.Timeout = 300 * time.Second
	}
	if c.Tests.LogTailBytes <= 0 {
		c.Tests.LogTailBytes = 8192
	}
	if c.Tests.CopyTimeout <= 0 {
		c.Tests.CopyTimeout = 60 * time.Second
	}
	if c.Tests.CopyMaxFiles <= 0 {
		c.Tests.CopyMaxFiles = 100000
	}
	if c.Agl == "" {
		exe, err := os.Executable()
		if err != nil {
			return c, fmt.Errorf("controller: the agl executable for sandboxes: %w", err)
		}
		c.Agl = exe
	}
	return c, nil
}

// timeout is the harness's time limit: the rollout's, or the task's
// timeout_seconds when that is shorter.
func (r *repoAttempt) timeout(rollout time.Duration) time.Duration {
	t := time.Duration(r.task.TimeoutSeconds * float64(time.Second))
	if t > 0 && (rollout <= 0 || t < rollout) {
		return t
	}
	return rollout
}

// harnessOutput copies the outside harness's stdout and stderr into its
// log files, each up to a bound; the rest is read, dropped and counted.
type harnessOutput struct {
	done       chan struct{} // closed once both streams ended
	bytes, cut atomic.Int64
	w          []*os.File // the pipes' write ends, the harness's
}

// boundOutput has cmd write its stdout and stderr into pipes whose reads
// are copied into outF and errF (which it closes when they end), bound
// bytes each.
func boundOutput(cmd *exec.Cmd, outF, errF *os.File, bound int64) (*harnessOutput, error) {
	h := &harnessOutput{done: make(chan struct{})}
	var rs []*os.File
	for range 2 {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(append(rs, h.w...)...)
			return nil, err
		}
		rs, h.w = append(rs, r), append(h.w, w)
	}
	cmd.Stdout, cmd.Stderr = h.w[0], h.w[1]
	var wg sync.WaitGroup
	for i, f := range []*os.File{outF, errF} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := sandbox.CopyOutput(f, rs[i], bound, []string{"stdout", "stderr"}[i])
			closeAll(rs[i], f)
			h.bytes.Add(n)
			h.cut.Add(max(n-bound, 0))
		}()
	}
	go func() {
		wg.Wait()
		close(h.done)
	}()
	return h, nil
}

// started closes this process's copies of the pipes' write ends, once the
// harness holds its own (or failed to start).
func (h *harnessOutput) started() { closeAll(h.w...) }

// wait waits until both streams ended, at most d (a process the harness
// left behind may hold them).
func (h *harnessOutput) wait(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-h.done:
	case <-t.C:
	}
}

// harnessCommand is the harness process: the configured command, on the
// host, or (a repository task with sandbox.harness inside) in the
// attempt's sandbox.
func (c *runner) harnessCommand(a *attempt) (*exec.Cmd, error) {
	if a.repo != nil && c.cfg.Sandbox.Harness == HarnessInside {
		return c.insideCommand(a)
	}
	cmd := exec.Command(a.argv[0], a.argv[1:]...)
	cmd.Dir, cmd.Env = c.cfg.Dir, a.env
	return cmd, nil
}

// runnerModules are test-runner modules that a workspace may not add at its
// top level, whatever Python's standard library holds.
var runnerModules = []string{"pytest", "_pytest", "pluggy", "sitecustomize", "usercustomize"}

// pythonNames is what the test workspace's filter knows of Python.
type pythonNames struct {
	// stdlib: the standard library's module names (the sandbox's default
	// interpreter, /usr/bin/python3, run isolated) plus runnerModules.
	stdlib map[string]bool
	// suffixes: the importable file suffixes, longest first
	// (importlib.machinery.all_suffixes(): .py, .pyc, .cpython-311-….so,
	// .abi3.so, .so).
	suffixes []string
}

// module is the module name a top-level workspace entry is imported as.
func (p pythonNames) module(name string) string {
	for _, s := range p.suffixes {
		if m, ok := strings.CutSuffix(name, s); ok && m != "" {
			return m
		}
	}
	return name
}

// defaultSuffixes are the importable suffixes without a Python to ask.
var defaultSuffixes = []string{".py", ".pyc", ".so", ".pyw"}

// pythonInfo asks the sandbox's default interpreter for pythonNames; just
// runnerModules and defaultSuffixes without a Python.
func pythonInfo() pythonNames {
	p := pythonNames{stdlib: map[string]bool{}, suffixes: defaultSuffixes}
	for _, n := range runnerModules {
		p.stdlib[n] = true
	}
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		py = "python3"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "-I", "-c", "import sys, importlib.machinery as m; print(' '.join(m.all_suffixes())); print(chr(10).join(sys.stdlib_module_names))").Output()
	if err != nil {
		return p
	}
	first, rest, _ := strings.Cut(string(out), "\n")
	p.suffixes = append(strings.Fields(first), defaultSuffixes...)
	slices.SortStableFunc(p.suffixes, func(a, b string) int { return len(b) - len(a) })
	for _, n := range strings.Fields(rest) {
		p.stdlib[n] = true
	}
	return p
}

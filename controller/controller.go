// Package controller runs agent harnesses for agl (local mode): it claims
// queued rollouts from a gateway and runs the configured harness command as
// a subprocess per attempt, in its own process group, with the environment
// contract of DESIGN.md:
//
//	OPENAI_BASE_URL    = GW/r/{rollout}/{attempt}/v1
//	ANTHROPIC_BASE_URL = GW/r/{rollout}/{attempt}
//	GOOGLE_GEMINI_BASE_URL = GW/r/{rollout}/{attempt} (the Gemini API: …/v1beta/models/…)
//	OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY = the attempt's scoped key
//	AGL_TASK           = the task JSON
//	AGL_REWARD_FILE    = a file the harness may write its reward to
//	AGL_EVENTS_URL     = GW/r/{rollout}/{attempt}/events (POST reward/custom events)
//	AGL_ROLLOUT_ID, AGL_ATTEMPT_ID, AGL_MODE
//
// The inherited environment never carries AGL_ADMIN_KEY to the harness.
//
// While the harness runs, the controller heartbeats the attempt; a heartbeat
// answered 409 means the attempt ended elsewhere (cancelled, reaped), and the
// process group is killed without completing the attempt. A harness running
// past its rollout's timeout_seconds gets SIGTERM on its whole process group
// (SIGKILL after KillGrace) and the attempt fails with "timeout …".
//
// The moment the harness exits, its scoped key is revoked at the gateway
// and every process it left behind is killed — its process group, and,
// the controller being the child subreaper (Linux), processes that left
// the group (setsid, double fork) too — so that nothing the harness
// started can post a reward afterwards. Then the last LogTailBytes of its
// stdout and of its stderr are appended as one "log" event each
// ({"stream","text","bytes","truncated"}), with the attempt's key, the
// admin key and anything shaped like a scoped key replaced by
// "[REDACTED]".
//
// The reward comes from Config.RewardSource:
//
//   - harness: a non-empty reward file (a JSON number or an store.Reward
//     object) is appended as a reward event with source "reward_file",
//     which outranks the reward events the harness posted to
//     AGL_EVENTS_URL; without one, the newest final reward event counts.
//   - evaluator: the Evaluator command runs with the same environment plus
//     AGL_LOG_FILE (the harness's full stdout), AGL_STDERR_FILE and
//     AGL_EXIT_CODE, and its stdout (or its last line) is parsed like the
//     reward file and appended with source "evaluator", which outranks
//     every reward the harness sent, final or per call, whenever it
//     arrived (store.Reward.Rank). A non-empty reward file is kept as a
//     "harness_reward" event, a diagnostic.
//   - both: the harness's final reward (file, else an event without
//     call_id) when it sent one; else the evaluator's.
//
// Then the attempt is completed exactly once: exit 0 → succeeded;
// otherwise failed with "exit status N: <last stderr line>", which the
// store retries up to the rollout's max_attempts.
//
// A harness that exits 0 without any reward still completes as succeeded:
// its rollout then has no reward summary, and what to do with it (drop it,
// count it as zero) is the trainer's decision. An unreadable reward (bad
// reward file, failing evaluator) fails the attempt instead.
package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/sandbox"
	"github.com/aglrl/agl/store"
)

// Config configures Run. Zero values take the documented defaults.
type Config struct {
	// GatewayURL is the gateway root, e.g. http://127.0.0.1:8080.
	GatewayURL string
	// AdminKey authenticates claims, heartbeats and completions.
	AdminKey string
	// Command is the harness: program and arguments (required). A program
	// name without a slash is looked up in PATH; "./x" is relative to Dir.
	Command []string
	// Dir is the harness's working directory ("" = the controller's).
	Dir string
	// Env holds extra KEY=VALUE entries added to the inherited environment
	// (the agl variables above override them).
	Env []string
	// Concurrency bounds the attempts run at once (default 1).
	Concurrency int
	// WorkerID names this controller in claims (default host-pid).
	WorkerID string
	// Mode, if set, claims only rollouts of that mode.
	Mode store.Mode
	// HeartbeatInterval is how often a running attempt heartbeats
	// (default 10s).
	HeartbeatInterval time.Duration
	// PollInterval is how long to wait when nothing is queued (default 500ms).
	PollInterval time.Duration
	// Evaluator, if set, is run after a harness exiting 0 (see
	// RewardSource); its stdout is the reward.
	Evaluator []string
	// RewardSource says whose reward the rollout gets: RewardHarness,
	// RewardEvaluator or RewardBoth (default: evaluator when an Evaluator
	// is configured, else harness).
	RewardSource string
	// EvaluatorTimeout bounds the evaluator (default 60s).
	EvaluatorTimeout time.Duration
	// LogTailBytes is how much of each output stream is kept (default 4096).
	LogTailBytes int
	// KillGrace is the wait between SIGTERM and SIGKILL (default 5s).
	KillGrace time.Duration
	// Logger receives the controller's own logs (default slog.Default()).
	Logger *slog.Logger
	// HTTP is the client used to reach the gateway (default: 90s timeout).
	HTTP *http.Client
	// ALPrefix is where the gateway serves Agent Lightning's API (default
	// /al), for the environment of AL rollouts (al.go); Python runs AL's
	// agent classes (default python3).
	ALPrefix string
	Python   string
	// Sandbox and Tests configure repository tasks (see repo.go): tasks
	// with a "repo" field run in a sandbox and get the test-based reward,
	// whatever RewardSource says.
	Sandbox SandboxConfig
	Tests   TestsConfig
	// Agl is the agl executable behind AGL_SANDBOX_EXEC (`agl sandbox
	// exec`; default os.Executable()).
	Agl string
}

// Reward sources (Config.RewardSource).
const (
	// RewardHarness: the harness's reward — its reward file when not
	// empty, else the newest final reward event it posted. No evaluator.
	RewardHarness = "harness"
	// RewardEvaluator: the evaluator's reward, always; whatever the
	// harness sent (reward file, reward events, per-call rewards) is kept
	// as diagnostics and never used.
	RewardEvaluator = "evaluator"
	// RewardBoth: the harness's reward when it sent a final one (reward
	// file or a reward event without call_id), else the evaluator's.
	RewardBoth = "both"
)

func (c Config) withDefaults() (Config, error) {
	if len(c.Command) > 0 && c.Command[0] == "" {
		return c, errors.New("controller: the harness command's program is empty")
	}
	return c.defaults()
}

// defaults checks and completes everything but the command (a Backend may
// carry its own).
func (c Config) defaults() (Config, error) {
	if c.ALPrefix == "" {
		c.ALPrefix = DefaultALPrefix
	}
	c.ALPrefix = "/" + strings.Trim(c.ALPrefix, "/")
	if c.Python == "" {
		c.Python = "python3"
	}
	if c.GatewayURL == "" {
		return c, errors.New("controller: no gateway URL configured")
	}
	if _, err := url.Parse(c.GatewayURL); err != nil {
		return c, fmt.Errorf("controller: gateway URL: %w", err)
	}
	if c.Mode != "" && !c.Mode.Valid() {
		return c, fmt.Errorf("controller: mode %q: want train or val", c.Mode)
	}
	for _, kv := range c.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return c, fmt.Errorf("controller: env entry %q: want KEY=VALUE", kv)
		}
	}
	if c.RewardSource == "" {
		c.RewardSource = RewardHarness
		if len(c.Evaluator) > 0 {
			c.RewardSource = RewardEvaluator
		}
	}
	switch c.RewardSource {
	case RewardHarness:
		if len(c.Evaluator) > 0 {
			return c, errors.New("controller: reward_source harness never runs the evaluator: set reward_source evaluator or both, or drop the evaluator")
		}
	case RewardEvaluator, RewardBoth:
		if len(c.Evaluator) == 0 {
			return c, fmt.Errorf("controller: reward_source %s needs an evaluator", c.RewardSource)
		}
	default:
		return c, fmt.Errorf("controller: reward_source %q: want harness, evaluator or both", c.RewardSource)
	}
	c.GatewayURL = strings.TrimRight(c.GatewayURL, "/")
	if c.Concurrency <= 0 {
		c.Concurrency = 1
	}
	if c.WorkerID == "" {
		h, _ := os.Hostname()
		if h == "" {
			h = "controller"
		}
		c.WorkerID = h + "-" + strconv.Itoa(os.Getpid())
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 10 * time.Second
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 500 * time.Millisecond
	}
	if c.EvaluatorTimeout <= 0 {
		c.EvaluatorTimeout = 60 * time.Second
	}
	if c.LogTailBytes <= 0 {
		c.LogTailBytes = 4096
	}
	if c.KillGrace <= 0 {
		c.KillGrace = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c.repoDefaults()
}

// Run claims and runs rollouts until ctx ends. On cancellation it kills the
// running harnesses, fails their attempts (store.AttemptStopped, so that they are
// requeued at once) and returns nil. It returns an error only for a
// configuration the gateway refuses (bad URL, wrong admin key).
func Run(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	c := cfg.newRunner()
	if err := becomeSubreaper(); err != nil {
		c.log.Warn("controller: cannot become the child subreaper: processes a harness detaches (setsid) may outlive its attempt", "err", err)
	}
	c.log.Info("controller: repository tasks' sandboxes bound memory and processes with", "cgroups", sandbox.CgroupBackend())
	defer c.door.CloseIdleConnections()
	return c.claimLoop(ctx, c.runAttempt)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

type runner struct {
	cfg Config
	api *api.Client
	log *slog.Logger
	// python is what the test workspace's filter knows of Python (module
	// names a repository's workspace may not add at its top level, see
	// repo.go), computed once.
	python func() pythonNames
	// door carries every gateway door's requests to the gateway, with
	// at most sandbox.door_upstream_conns connections.
	door *http.Transport
}

// errLost is the cancel cause of an attempt that ended elsewhere.
var errLost = errors.New("attempt ended elsewhere")

// attempt is one running attempt.
type attempt struct {
	claim   store.Claim
	rid     string
	aid     string
	dir     string
	outPath string
	errPath string
	env     []string
	// argv is the harness command (controller.command, or an AL agent
	// class's worker).
	argv []string
	log  *slog.Logger
	// secrets are redacted from everything stored from the attempt's
	// output: its scoped key and the admin key.
	secrets []string
	// repo is set for a repository task.
	repo *repoAttempt
}

func (c *runner) runAttempt(parent context.Context, claim store.Claim) {
	a := &attempt{claim: claim, rid: claim.Rollout.ID, aid: claim.Attempt.ID}
	a.log = c.log.With("rollout", a.rid, "attempt", a.aid)
	a.secrets = []string{claim.Key, c.cfg.AdminKey}
	procs.begin(a.aid)
	defer procs.end(a.aid)
	a.log.Debug("controller: attempt claimed")
	// ctx ends when the controller stops or the attempt is lost.
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		c.heartbeat(ctx, a, cancel)
	}()
	defer func() { cancel(nil); <-hbDone }()

	dir, err := os.MkdirTemp("", "agl-attempt-")
	if err != nil {
		c.complete(a, store.AttemptFailed, "controller: "+err.Error())
		return
	}
	defer os.RemoveAll(dir)
	a.dir = dir
	a.outPath, a.errPath = filepath.Join(dir, "stdout.log"), filepath.Join(dir, "stderr.log")
	rewardPath := filepath.Join(dir, "reward")
	if err := os.WriteFile(rewardPath, nil, 0o600); err != nil {
		c.complete(a, store.AttemptFailed, "controller: "+err.Error())
		return
	}
	env, argv, err := c.alHarness(claim, c.env(claim, rewardPath))
	if err == nil && len(argv) == 0 {
		err = errors.New("no harness command configured (controller.command), and the rollout is no Agent Lightning rollout with config.local.agent_class")
	}
	if err != nil {
		c.complete(a, store.AttemptFailed, "controller: "+err.Error())
		return
	}
	a.env, a.argv = env, argv
	defer c.cleanupRepo(a)
	if err := c.prepareRepo(ctx, a); err != nil {
		c.complete(a, store.AttemptFailed, "controller: "+err.Error())
		return
	}

	outF, err1 := os.Create(a.outPath)
	errF, err2 := os.Create(a.errPath)
	if err := errors.Join(err1, err2); err != nil {
		closeAll(outF, errF)
		c.complete(a, store.AttemptFailed, "controller: "+err.Error())
		return
	}
	cmd, err := c.harnessCommand(a)
	if err != nil {
		closeAll(outF, errF)
		c.complete(a, store.AttemptFailed, "controller: "+err.Error())
		return
	}
	cmd.Stdout, cmd.Stderr = outF, errF
	if a.repo != nil && c.cfg.Sandbox.Harness == HarnessOutside {
		// Bounded like the inside harness's (sandbox.harness_output_bytes).
		if a.repo.output, err = boundOutput(cmd, outF, errF, c.cfg.Sandbox.HarnessOutputBytes); err != nil {
			closeAll(outF, errF)
			c.complete(a, store.AttemptFailed, "controller: "+err.Error())
			return
		}
	}
	setGroup(cmd)
	err = procs.start(cmd)
	if a.repo != nil && a.repo.output != nil {
		a.repo.output.started() // the copiers hold the log files
	} else {
		closeAll(outF, errF) // the child holds its own copies
	}
	if err != nil {
		c.complete(a, store.AttemptFailed, "start harness: "+err.Error())
		return
	}
	pid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		procs.remove(pid)
		exited <- err
	}()

	var deadline <-chan time.Time
	timeout := time.Duration(claim.Rollout.Config.TimeoutSeconds * float64(time.Second))
	if a.repo != nil {
		timeout = a.repo.timeout(timeout)
	}
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}

	select {
	case werr := <-exited:
		c.harnessEnded(a, pid)
		if a.repo != nil && a.repo.output != nil {
			a.repo.output.wait(10 * time.Second)
		}
		c.finish(ctx, a, werr)
	case <-deadline:
		c.revoke(a)
		signalGroup(pid, syscall.SIGTERM)
		msg := fmt.Sprintf("timeout: killed after %s", timeout)
		a.log.Info("controller: attempt timed out, killing its process group", "timeout", timeout)
		// Record and complete before waiting for the group to die, so that
		// the store's reaper does not time the attempt out meanwhile.
		c.appendLogs(ctx, a)
		c.complete(a, store.AttemptFailed, msg)
		c.reap(pid, exited)
		c.sweep(a)
	case <-ctx.Done():
		if errors.Is(context.Cause(ctx), errLost) {
			a.log.Info("controller: attempt ended elsewhere, killing its process group")
			signalGroup(pid, syscall.SIGKILL)
			<-exited
			c.sweep(a)
			return
		}
		c.revoke(a)
		signalGroup(pid, syscall.SIGTERM)
		c.reap(pid, exited)
		c.sweep(a)
		c.appendLogs(context.Background(), a)
		c.complete(a, store.AttemptFailed, store.AttemptStopped)
	}
}

// harnessEnded runs the moment the harness exits by itself: its key dies
// (so nothing it left behind can post a reward any more), then every
// process it left behind is killed, before logs are read and the
// evaluator runs.
func (c *runner) harnessEnded(a *attempt, pid int) {
	c.revoke(a)
	signalGroup(pid, syscall.SIGKILL)
	c.sweep(a)
}

// revoke kills the attempt's scoped key at the gateway. A failure is
// logged: the reward ranks (store.Reward.Rank) still keep an evaluator's
// reward authoritative.
func (c *runner) revoke(a *attempt) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.api.RevokeKey(ctx, a.rid, a.aid); err != nil {
		a.log.Warn("controller: revoke the attempt's key", "err", err)
	}
}

// sweep kills whatever processes the attempt left behind (see the
// package-level sweep).
func (c *runner) sweep(a *attempt) {
	// No harness or evaluator is being started meanwhile: between fork
	// and exec a child shows the controller's environment in its own
	// group, and would pass for a left-behind process.
	procs.starting.Lock()
	n := sweep(a.aid, procs.running, procs.live)
	procs.starting.Unlock()
	if n > 0 {
		a.log.Info("controller: killed processes the attempt left behind", "processes", n)
	}
}

// procs tracks, for the whole process (the subreaper is process-wide and
// several controllers may run in one process), the attempts running and
// the harness and evaluator processes alive, so that one attempt's sweep
// spares the others.
var procs = &registry{pids: map[int]bool{}, attempts: map[string]int{}}

type registry struct {
	// starting is held (shared) while a process is started and
	// registered, and exclusively by a sweep.
	starting sync.RWMutex
	mu       sync.Mutex
	pids     map[int]bool
	attempts map[string]int
}

// start starts cmd and registers its process as live, with no sweep
// running in between.
func (r *registry) start(cmd *exec.Cmd) error {
	r.starting.RLock()
	defer r.starting.RUnlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	r.add(cmd.Process.Pid)
	return nil
}

func (r *registry) begin(aid string) { r.mu.Lock(); r.attempts[aid]++; r.mu.Unlock() }

func (r *registry) end(aid string) {
	r.mu.Lock()
	if r.attempts[aid]--; r.attempts[aid] <= 0 {
		delete(r.attempts, aid)
	}
	r.mu.Unlock()
}

func (r *registry) add(pid int)    { r.mu.Lock(); r.pids[pid] = true; r.mu.Unlock() }
func (r *registry) remove(pid int) { r.mu.Lock(); delete(r.pids, pid); r.mu.Unlock() }

func (r *registry) live(pid int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pids[pid]
}

func (r *registry) running(aid string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts[aid] > 0
}

// reap waits up to KillGrace for the harness to exit after SIGTERM, then
// kills its whole group.
func (c *runner) reap(pid int, exited <-chan error) {
	t := time.NewTimer(c.cfg.KillGrace)
	defer t.Stop()
	select {
	case <-exited:
	case <-t.C:
		signalGroup(pid, syscall.SIGKILL)
		<-exited
	}
	signalGroup(pid, syscall.SIGKILL)
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// inheritedSecret names variables of the controller's own environment that
// the harness never inherits: the admin key, the store's URL (it may hold a
// database password) and provider credentials that would travel next to the
// scoped key (an SDK sending ANTHROPIC_AUTH_TOKEN as a bearer beside the
// scoped x-api-key is refused by the gateway as two different keys; the
// Gemini SDKs prefer GOOGLE_API_KEY to GEMINI_API_KEY). The scoped keys
// themselves are set below.
func inheritedSecret(name string) bool {
	switch name {
	case "AGL_ADMIN_KEY", "AGL_STORE_URL", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY":
		return true
	}
	return false
}

// env builds the harness environment.
func (c *runner) env(claim store.Claim, rewardPath string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); inheritedSecret(k) {
			continue
		}
		env = append(env, kv)
	}
	return append(env, c.contractEnv(c.cfg.GatewayURL, claim, rewardPath)...)
}

// heartbeat reports the attempt alive until ctx ends; a 409 or 404 answer
// cancels the attempt with errLost.
func (c *runner) heartbeat(ctx context.Context, a *attempt, cancel context.CancelCauseFunc) {
	t := time.NewTicker(c.heartbeatEvery(a.claim))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, err := c.api.Heartbeat(ctx, a.rid, a.aid)
		var ae *api.Error
		switch {
		case err == nil:
		case errors.As(err, &ae) && (ae.Status == http.StatusConflict || ae.Status == http.StatusNotFound):
			cancel(errLost)
			return
		case ctx.Err() == nil:
			a.log.Warn("controller: heartbeat failed", "err", err)
		}
	}
}

// finish handles a harness that exited by itself: logs, reward, completion.
func (c *runner) finish(ctx context.Context, a *attempt, werr error) {
	c.keepWorkspace(a) // before the attempt completes: whoever sees it ended finds the copy
	c.appendLogs(ctx, a)
	code := exitCode(werr)
	if werr != nil {
		msg := exitMessage(werr)
		if line := lastLine(a.redact(readTail(a.errPath, c.cfg.LogTailBytes))); line != "" {
			msg += ": " + line
		}
		c.complete(a, store.AttemptFailed, msg)
		return
	}
	if err := c.reward(ctx, a, code); err != nil {
		if errors.Is(context.Cause(ctx), errLost) {
			return
		}
		c.complete(a, store.AttemptFailed, a.redact(err.Error()))
		return
	}
	c.complete(a, store.AttemptSucceeded, "")
}

// reward records the attempt's reward from the configured source (see
// RewardSource). Every reward the controller appends carries its source
// (store.SourceRewardFile, store.SourceEvaluator), which ranks it above what
// the harness posted, whenever that arrived.
func (c *runner) reward(ctx context.Context, a *attempt, code int) error {
	b, err := os.ReadFile(filepath.Join(a.dir, "reward"))
	if err != nil {
		return fmt.Errorf("reward file: %w", err)
	}
	b = bytes.TrimSpace(b)
	if a.repo != nil {
		c.keepHarnessReward(ctx, a, b)
		return c.testsReward(ctx, a)
	}
	if c.cfg.RewardSource == RewardEvaluator {
		c.keepHarnessReward(ctx, a, b)
		return c.evaluatorReward(ctx, a, code)
	}
	if len(b) > 0 {
		data, err := rewardData(b, store.SourceRewardFile)
		if err != nil {
			return fmt.Errorf("reward file: %w", err)
		}
		return c.append(ctx, a, store.NewEvent{Type: store.EventReward, Data: data})
	}
	if c.cfg.RewardSource == RewardHarness {
		return nil // the harness's own reward events, if any
	}
	// RewardBoth: the harness's final reward event, if it posted one
	// (per-call rewards do not count), else the evaluator.
	evs, err := c.api.ListEvents(ctx, store.EventFilter{RolloutID: a.rid, AttemptID: a.aid, Types: []string{store.EventReward}})
	if err != nil {
		return fmt.Errorf("controller: list reward events: %w", err)
	}
	datas := make([]json.RawMessage, len(evs))
	for i, e := range evs {
		datas[i] = e.Data
	}
	if store.ResolveRewards(datas, store.Reward.PrimaryValue).Final >= 0 {
		return nil // the harness reported its own reward
	}
	return c.evaluatorReward(ctx, a, code)
}

// keepHarnessReward keeps a non-empty reward file as a diagnostic, never
// the reward.
func (c *runner) keepHarnessReward(ctx context.Context, a *attempt, b []byte) {
	if len(b) == 0 {
		return
	}
	text := a.redact(truncate(string(b), c.cfg.LogTailBytes))
	d, _ := json.Marshal(struct {
		Text  string `json:"text"`
		Bytes int    `json:"bytes"`
	}{text, len(b)})
	if err := c.append(ctx, a, store.NewEvent{Type: store.EventHarnessReward, Data: d}); err != nil {
		a.log.Warn("controller: record the harness's reward file", "err", err)
	}
}

// evaluatorReward runs the evaluator and appends its reward.
func (c *runner) evaluatorReward(ctx context.Context, a *attempt, code int) error {
	out, err := c.evaluate(ctx, a, code)
	if err != nil {
		return err
	}
	data, err := rewardData(out, store.SourceEvaluator)
	if err != nil {
		// Accept a chatty evaluator whose last line is the reward.
		if data, err = rewardData([]byte(lastLine(string(out))), store.SourceEvaluator); err != nil {
			return fmt.Errorf("evaluator output %q: %w", truncate(string(out), 200), err)
		}
	}
	return c.append(ctx, a, store.NewEvent{Type: store.EventReward, Data: data})
}

// evaluate runs the evaluator in its own process group and returns its stdout.
func (c *runner) evaluate(ctx context.Context, a *attempt, code int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.EvaluatorTimeout)
	defer cancel()
	cmd := exec.Command(c.cfg.Evaluator[0], c.cfg.Evaluator[1:]...)
	cmd.Dir = c.cfg.Dir
	cmd.Env = append(a.env[:len(a.env):len(a.env)], "AGL_LOG_FILE="+a.outPath, "AGL_STDERR_FILE="+a.errPath, "AGL_EXIT_CODE="+strconv.Itoa(code))
	var out bytes.Buffer
	errTail := &tailBuffer{max: c.cfg.LogTailBytes}
	cmd.Stdout, cmd.Stderr = &limitedWriter{w: &out, n: 1 << 20}, errTail
	setGroup(cmd)
	if err := procs.start(cmd); err != nil {
		return nil, fmt.Errorf("evaluator: %w", err)
	}
	pid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		procs.remove(pid)
		exited <- err
	}()
	var err error
	select {
	case err = <-exited:
		signalGroup(pid, syscall.SIGKILL)
		c.sweep(a)
	case <-ctx.Done():
		signalGroup(pid, syscall.SIGKILL)
		<-exited
		c.sweep(a)
		return nil, fmt.Errorf("evaluator: %w", context.Cause(ctx))
	}
	if err != nil {
		msg := "evaluator: " + exitMessage(err)
		if line := lastLine(errTail.String()); line != "" {
			msg += ": " + line
		}
		return nil, errors.New(msg)
	}
	return bytes.TrimSpace(out.Bytes()), nil
}

// rewardData validates a reward (a JSON number or an store.Reward object) and
// returns it as reward event data stamped with source.
func rewardData(b []byte, source string) (json.RawMessage, error) {
	b = bytes.TrimSpace(b)
	if _, err := store.ParseReward(b); err != nil {
		return nil, err
	}
	obj := map[string]json.RawMessage{}
	if len(b) > 0 && b[0] == '{' {
		if err := json.Unmarshal(b, &obj); err != nil {
			return nil, err
		}
	} else {
		obj["value"] = json.RawMessage(b)
	}
	obj["source"], _ = json.Marshal(source)
	return json.Marshal(obj)
}

// redact replaces the attempt's secrets (its scoped key, the admin key)
// and anything shaped like a scoped key in s with "[REDACTED]".
func (a *attempt) redact(s string) string {
	for _, k := range a.secrets {
		if k != "" {
			s = strings.ReplaceAll(s, k, redacted)
		}
	}
	return scopedKeyRE.ReplaceAllString(s, redacted)
}

const redacted = "[REDACTED]"

// scopedKeyRE matches a scoped key (store.NewKey: the prefix and 43
// base64url characters), whichever attempt it belongs to.
var scopedKeyRE = regexp.MustCompile(regexp.QuoteMeta(store.KeyPrefix) + `[A-Za-z0-9_-]{16,}`)

// logData is the data of the "log" events the controller appends.
type logData struct {
	Stream    string `json:"stream"`
	Text      string `json:"text"`
	Bytes     int64  `json:"bytes"`
	Truncated bool   `json:"truncated,omitempty"`
}

// appendLogs appends the stdout and stderr tails (those not empty) as one
// "log" event each (appendTails).
func (c *runner) appendLogs(ctx context.Context, a *attempt) {
	var logs []Log
	for _, s := range []struct{ name, path string }{{"stdout", a.outPath}, {"stderr", a.errPath}} {
		fi, err := os.Stat(s.path)
		if err != nil || fi.Size() == 0 {
			continue
		}
		// Read a margin more than kept, so that a key the tail's start
		// would cut in two is still whole when redacted.
		logs = append(logs, Log{Stream: s.name, Text: readTail(s.path, c.cfg.LogTailBytes+a.margin()),
			Bytes: fi.Size(), Truncated: fi.Size() > int64(c.cfg.LogTailBytes)})
	}
	c.appendTails(ctx, a, logs)
}

// margin is the longest secret the attempt redacts.
func (a *attempt) margin() int {
	n := len(store.KeyPrefix) + 64
	for _, k := range a.secrets {
		n = max(n, len(k))
	}
	return n
}

// runeStart drops the bytes of a rune cut at the start of s.
func runeStart(s string) string {
	for i := 0; i < len(s) && i < 4; i++ {
		if s[i]&0xC0 != 0x80 {
			return s[i:]
		}
	}
	return s
}

func (c *runner) append(ctx context.Context, a *attempt, evs ...store.NewEvent) error {
	if ctx.Err() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := c.api.AppendEvents(ctx, a.rid, a.aid, evs); err != nil {
		return fmt.Errorf("controller: append %s event: %w", evs[0].Type, err)
	}
	return nil
}

// complete ends the attempt, once. Transport errors are retried (a lost
// answer to a call that did land is then answered 409, which means done);
// any answer from the gateway ends the matter.
func (c *runner) complete(a *attempt, st store.AttemptStatus, msg string) {
	msg = truncate(msg, 1000)
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		r, err := c.api.Complete(ctx, a.rid, a.aid, st, msg)
		cancel()
		var ae *api.Error
		switch {
		case err == nil:
			// Successes are routine (one per rollout); failures are news.
			level := slog.LevelInfo
			if st == store.AttemptSucceeded {
				level = slog.LevelDebug
			}
			a.log.Log(context.Background(), level, "controller: attempt completed", "status", st, "error", msg, "rollout_status", r.Status)
			return
		case errors.As(err, &ae):
			if ae.Status == http.StatusConflict {
				a.log.Info("controller: attempt had already ended", "status", st, "err", err)
			} else {
				a.log.Error("controller: complete attempt refused", "status", st, "err", err)
			}
			return
		case try >= 4:
			a.log.Error("controller: complete attempt failed, the reaper will end it", "status", st, "err", err)
			return
		}
		time.Sleep(time.Duration(200<<try) * time.Millisecond)
	}
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// exitMessage says how the process ended: "exit status N" or "signal: …".
func exitMessage(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ProcessState.String()
	}
	return err.Error()
}

// readTail returns up to n last bytes of a file.
func readTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-int64(n), 0)
	b, _ := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	if off > 0 {
		// Start at a rune boundary.
		for i := 0; i < len(b) && i < 4; i++ {
			if b[i]&0xC0 != 0x80 {
				b = b[i:]
				break
			}
		}
	}
	return string(b)
}

// lastLine returns the last non-blank line of s, trimmed and bounded.
func lastLine(s string) string {
	s = strings.TrimRight(s, " \t\r\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return truncate(strings.TrimSpace(s), 300)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// limitedWriter keeps the first n bytes and discards the rest.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

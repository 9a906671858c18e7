//go:build unix

package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aglrl/agl/controller"
	"github.com/aglrl/agl/gateway"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/sqlite"
)

const adminKey = "admin-test-key"

// env is a real gateway (sqlite store, proxy for /r/…/events) on loopback
// that counts the completions it accepted per attempt.
type env struct {
	st  store.Store
	srv *httptest.Server

	mu        sync.Mutex
	completes map[string]int // ".../attempts/{aid}/complete" → 2xx answers
	refused   int            // non-2xx answers to complete
	inflight  int            // completions being served
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(s int) { w.status = s; w.ResponseWriter.WriteHeader(s) }

func newEnv(t testing.TB, reapInterval time.Duration) *env {
	t.Helper()
	return newEnvLLM(t, reapInterval, nil)
}

// newEnvLLM is newEnv whose model routes answer with backend (nil: none).
func newEnvLLM(t testing.TB, reapInterval time.Duration, backend proxy.Backend) *env {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "agl.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	gw := gateway.New(gateway.Options{Store: st, AdminKey: adminKey, LLM: proxy.New(proxy.Config{}, st, backend), ReapInterval: reapInterval, Logger: quiet})
	e := &env{st: st, completes: map[string]int{}}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/complete") {
			gw.ServeHTTP(w, r)
			return
		}
		e.mu.Lock()
		e.inflight++
		e.mu.Unlock()
		sw := &statusWriter{ResponseWriter: w, status: 200}
		gw.ServeHTTP(sw, r)
		e.mu.Lock()
		e.inflight--
		if sw.status < 300 {
			e.completes[r.URL.Path]++
		} else {
			e.refused++
		}
		e.mu.Unlock()
	})
	e.srv = httptest.NewServer(h)
	if reapInterval > 0 {
		// The reaper runs in Serve only; run it here the same way.
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			tk := time.NewTicker(reapInterval)
			defer tk.Stop()
			for {
				select {
				case <-rctx.Done():
					return
				case <-tk.C:
					st.Reap(rctx, time.Now())
				}
			}
		}()
		t.Cleanup(func() { cancel(); <-done })
	}
	t.Cleanup(func() { e.srv.Close(); st.Close() })
	return e
}

func (e *env) create(t testing.TB, n int, cfg store.RolloutConfig, task string) []string {
	t.Helper()
	var nr []store.NewRollout
	for i := 0; i < n; i++ {
		nr = append(nr, store.NewRollout{Task: json.RawMessage(task), Mode: store.ModeTrain, Config: cfg})
	}
	rs, err := e.st.CreateRollouts(context.Background(), nr)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.ID)
	}
	return ids
}

// config returns a fast controller config running the harness in testdata.
func (e *env) config(harness ...string) controller.Config {
	dir, _ := filepath.Abs("testdata")
	return controller.Config{
		GatewayURL: e.srv.URL, AdminKey: adminKey, Command: harness, Dir: dir,
		HeartbeatInterval: 100 * time.Millisecond, PollInterval: 50 * time.Millisecond,
		KillGrace: 300 * time.Millisecond,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// start runs the controller until the returned stop is called (or the test
// ends); stop waits for Run to return and reports its error.
func start(t *testing.T, cfg controller.Config) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- controller.Run(ctx, cfg) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-errc:
			case <-time.After(10 * time.Second):
				err = fmt.Errorf("Run did not return within 10s of cancellation")
			}
		})
		return err
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	return stop
}

// wait waits until every rollout is terminal and returns them with attempts.
func (e *env) wait(t *testing.T, ids []string, within time.Duration) []store.Rollout {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var out []store.Rollout
		done := true
		for _, id := range ids {
			r, err := e.st.GetRollout(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			done = done && r.Status.Terminal()
			out = append(out, r)
		}
		if done {
			return out
		}
		if time.Now().After(deadline) {
			for _, r := range out {
				t.Logf("rollout %s: %s (%d attempts) %s", r.ID, r.Status, r.NumAttempts, r.Error)
			}
			t.Fatalf("rollouts not terminal within %s", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkOnce fails unless every attempt of rs was completed exactly once
// through the API and no completion was refused.
func (e *env) checkOnce(t *testing.T, rs []store.Rollout) {
	t.Helper()
	// A rollout turns terminal inside the completion request: let the
	// counting middleware see its answer.
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		e.mu.Lock()
		idle := e.inflight == 0
		e.mu.Unlock()
		if idle || time.Now().After(deadline) {
			break
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, r := range rs {
		for _, a := range r.Attempts {
			p := "/api/rollouts/" + r.ID + "/attempts/" + a.ID + "/complete"
			if c := e.completes[p]; c != 1 {
				t.Errorf("attempt %s of %s completed %d times, want 1", a.ID, r.ID, c)
			}
			n++
		}
	}
	if len(e.completes) != n {
		t.Errorf("%d attempts completed, want %d", len(e.completes), n)
	}
	if e.refused != 0 {
		t.Errorf("%d completions refused by the gateway", e.refused)
	}
}

func (e *env) events(t *testing.T, rid, typ string) []store.Event {
	t.Helper()
	evs, err := e.st.ListEvents(context.Background(), store.EventFilter{RolloutID: rid, Types: []string{typ}})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func logText(t *testing.T, evs []store.Event, stream string) string {
	t.Helper()
	for _, ev := range evs {
		var d struct{ Stream, Text string }
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatal(err)
		}
		if d.Stream == stream {
			return d.Text
		}
	}
	return ""
}

// TestRewardSources: the reward arrives by the reward file, by an event the
// harness posts to AGL_EVENTS_URL, or from the evaluator; a harness that
// reports none still succeeds, without a reward.
func TestRewardSources(t *testing.T) {
	cases := []struct {
		name      string
		harness   []string
		evaluator []string
		want      *float64
	}{
		{"reward file", []string{"sh", "reward_file.sh"}, nil, ptr(0.75)},
		{"reward event", []string{"python3", "reward_event.py"}, nil, ptr(1)},
		{"both: reward event wins over evaluator", []string{"python3", "reward_event.py"}, []string{"sh", "-c", "echo 0.25"}, ptr(1)},
		{"evaluator: reward event ignored", []string{"python3", "reward_event.py"}, []string{"sh", "-c", "echo 0.25"}, ptr(0.25)},
		{"evaluator: reward file ignored", []string{"sh", "reward_file.sh"}, []string{"sh", "-c", "echo 0.25"}, ptr(0.25)},
		{"both: reward file wins over evaluator", []string{"sh", "reward_file.sh"}, []string{"sh", "-c", "echo 0.25"}, ptr(0.75)},
		{"evaluator", []string{"sh", "answer.sh"}, []string{"sh", "-c", `grep -q "answer 42" "$AGL_LOG_FILE" && echo "checked" && echo 1 || echo 0`}, ptr(1)},
		{"harness relative to dir", []string{"./answer.sh"}, []string{"sh", "-c", `grep -q "answer 42" "$AGL_LOG_FILE" && echo 1 || echo 0`}, ptr(1)},
		{"evaluator says zero", []string{"sh", "silent.sh"}, []string{"sh", "-c", `grep -q "answer 42" "$AGL_LOG_FILE" && echo 1 || echo 0`}, ptr(0)},
		{"no reward", []string{"sh", "silent.sh"}, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, -1)
			ids := e.create(t, 1, store.RolloutConfig{MaxAttempts: 2}, `{"q":"1+1"}`)
			cfg := e.config(tc.harness...)
			cfg.Evaluator = tc.evaluator
			if strings.HasPrefix(tc.name, "both:") {
				cfg.RewardSource = controller.RewardBoth
			}
			start(t, cfg)
			rs := e.wait(t, ids, 10*time.Second)
			r := rs[0]
			if r.Status != store.RolloutSucceeded || r.NumAttempts != 1 {
				t.Fatalf("rollout %s after %d attempts (%s), want succeeded after 1", r.Status, r.NumAttempts, r.Error)
			}
			switch {
			case tc.want == nil && r.Reward != nil:
				t.Errorf("reward %v, want none", *r.Reward)
			case tc.want != nil && (r.Reward == nil || *r.Reward != *tc.want):
				t.Errorf("reward %v, want %v", fmtPtr(r.Reward), *tc.want)
			}
			e.checkOnce(t, rs)
		})
	}
}

func ptr(f float64) *float64 { return &f }

func fmtPtr(f *float64) string {
	if f == nil {
		return "none"
	}
	return strconv.FormatFloat(*f, 'g', -1, 64)
}

// TestEnvContract: the harness sees the gateway routes of its attempt, the
// scoped key, the task, extra env and working directory, never the admin
// key; its stdout and stderr tails become log events.
func TestEnvContract(t *testing.T) {
	t.Setenv("AGL_ADMIN_KEY", adminKey)
	t.Setenv("AGL_STORE_URL", "postgres://agl:secret@db/agl")
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "sk-ant-real")
	t.Setenv("GOOGLE_API_KEY", "AIza-real")
	e := newEnv(t, -1)
	ids := e.create(t, 1, store.RolloutConfig{}, `{"q":"2+2"}`)
	cfg := e.config("sh", "reward_file.sh")
	cfg.Env = []string{"EXTRA=yes"}
	start(t, cfg)
	r := e.wait(t, ids, 10*time.Second)[0]
	if r.Status != store.RolloutSucceeded {
		t.Fatalf("rollout %s: %s", r.Status, r.Error)
	}
	aid := r.Attempts[0].ID
	logs := e.events(t, r.ID, store.EventLog)
	out := logText(t, logs, "stdout")
	base := e.srv.URL + "/r/" + r.ID + "/" + aid
	dir, _ := filepath.Abs("testdata")
	for _, want := range []string{
		"base=" + base + "/v1\n", "anthropic=" + base + "\n", "gemini=" + base + "\n", "google=none\n", "events=" + base + "/events\n",
		`task={"q":"2+2"}` + "\n", "ids=" + r.ID + "/" + aid + " mode=train\n",
		"admin=none extra=yes\n", "store=none token=none\n", "pwd=" + dir + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout log lacks %q:\n%s", want, out)
		}
	}
	// The key handed out is the attempt's scoped key (the event it posted
	// with it was taken), and it never reaches the stored logs.
	if len(e.events(t, r.ID, "key_check")) != 1 {
		t.Error("the harness's key did not post its event")
	}
	if !strings.Contains(out, "key=[REDACTED]\nakey=[REDACTED]\n") || !strings.Contains(out, "gkey=[REDACTED]\n") || strings.Contains(out, store.KeyPrefix) {
		t.Errorf("stdout log shows the key:\n%s", out)
	}
	if got := logText(t, logs, "stderr"); got != "to stderr\n" {
		t.Errorf("stderr log %q", got)
	}
	if len(logs) != 2 {
		t.Errorf("%d log events, want 2 (stdout, stderr)", len(logs))
	}
}

// TestLogTail: only the last LogTailBytes of a stream are kept.
func TestLogTail(t *testing.T) {
	e := newEnv(t, -1)
	ids := e.create(t, 1, store.RolloutConfig{}, `{}`)
	cfg := e.config("sh", "-c", `i=0; while [ $i -lt 500 ]; do echo "line $i"; i=$((i+1)); done`)
	cfg.LogTailBytes = 64
	start(t, cfg)
	r := e.wait(t, ids, 10*time.Second)[0]
	evs := e.events(t, r.ID, store.EventLog)
	if len(evs) != 1 {
		t.Fatalf("%d log events, want 1", len(evs))
	}
	var d struct {
		Text      string
		Bytes     int64
		Truncated bool
	}
	json.Unmarshal(evs[0].Data, &d)
	if len(d.Text) != 64 || !strings.HasSuffix(d.Text, "line 499\n") || !d.Truncated || d.Bytes < 4000 {
		t.Errorf("log tail %+v", d)
	}
}

// TestCrashRetried: a harness exiting 3 is retried up to max_attempts, then
// the rollout fails with the exit status and its last stderr line.
func TestCrashRetried(t *testing.T) {
	e := newEnv(t, -1)
	ids := e.create(t, 1, store.RolloutConfig{MaxAttempts: 2}, `{}`)
	start(t, e.config("sh", "crash.sh"))
	rs := e.wait(t, ids, 10*time.Second)
	r := rs[0]
	const want = "exit status 3: boom: division by zero"
	if r.Status != store.RolloutFailed || r.NumAttempts != 2 || len(r.Attempts) != 2 {
		t.Fatalf("rollout %s after %d attempts, want failed after 2", r.Status, r.NumAttempts)
	}
	if !strings.Contains(r.Error, want) {
		t.Errorf("rollout error %q, want it to contain %q", r.Error, want)
	}
	for _, a := range r.Attempts {
		if a.Status != store.AttemptFailed || a.Error != want {
			t.Errorf("attempt %d: %s %q, want failed %q", a.Number, a.Status, a.Error, want)
		}
	}
	e.checkOnce(t, rs)
}

// TestTimeoutKillsGroup: a harness that ignores SIGTERM and leaves a
// grandchild is killed, process group and all, once past its timeout; the
// attempt fails with "timeout" and is retried, never stuck.
func TestTimeoutKillsGroup(t *testing.T) {
	for _, reap := range []time.Duration{-1, 100 * time.Millisecond} {
		t.Run(fmt.Sprintf("reaper=%v", reap > 0), func(t *testing.T) {
			e := newEnv(t, reap)
			pids := t.TempDir()
			ids := e.create(t, 1, store.RolloutConfig{TimeoutSeconds: 0.5, MaxAttempts: 2}, `{}`)
			cfg := e.config("sh", "hang.sh")
			cfg.Env = []string{"PID_DIR=" + pids}
			start(t, cfg)
			t0 := time.Now()
			rs := e.wait(t, ids, 10*time.Second)
			r := rs[0]
			if r.Status != store.RolloutFailed || r.NumAttempts != 2 {
				t.Fatalf("rollout %s after %d attempts, want failed after 2", r.Status, r.NumAttempts)
			}
			if d := time.Since(t0); d > 5*time.Second {
				t.Errorf("two 0.5s attempts took %s", d)
			}
			for _, a := range r.Attempts {
				// Without the reaper the controller ends the attempt; with it
				// either may win the race, never both.
				if !(a.Status == store.AttemptFailed && strings.HasPrefix(a.Error, "timeout")) && !(reap > 0 && a.Status == store.AttemptTimeout) {
					t.Errorf("attempt %d: %s %q, want failed with timeout", a.Number, a.Status, a.Error)
				}
				for _, who := range []string{"harness", "grandchild"} {
					b, err := os.ReadFile(filepath.Join(pids, a.ID+"."+who))
					if err != nil {
						t.Fatalf("%s pid: %v", who, err)
					}
					pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
					waitDead(t, who, pid)
				}
			}
			if reap < 0 {
				e.checkOnce(t, rs)
			} else {
				e.mu.Lock()
				for p, c := range e.completes {
					if c > 1 {
						t.Errorf("%s completed %d times", p, c)
					}
				}
				e.mu.Unlock()
			}
		})
	}
}

// waitDead fails unless pid is gone (or a zombie) within 3s.
func waitDead(t *testing.T, who string, pid int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
			return
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) > 0 && f[0] == "Z" {
				return
			}
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("%s (pid %d) still alive", who, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestConcurrencyLimit: with Concurrency 2, six harnesses (each stays
// until another runs beside it, then 0.3 s more) run two at a time, never
// more.
func TestConcurrencyLimit(t *testing.T) {
	e := newEnv(t, -1)
	spans := t.TempDir()
	ids := e.create(t, 6, store.RolloutConfig{}, `{}`)
	cfg := e.config("python3", "overlap.py")
	cfg.Env = []string{"SPAN_DIR=" + spans}
	cfg.Concurrency = 2
	start(t, cfg)
	rs := e.wait(t, ids, 40*time.Second)
	for _, r := range rs {
		if r.Status != store.RolloutSucceeded || r.Reward == nil || *r.Reward != 0.5 {
			t.Fatalf("rollout %s: %s reward %s %s", r.ID, r.Status, fmtPtr(r.Reward), r.Error)
		}
	}
	e.checkOnce(t, rs)
	type edge struct {
		t     float64
		delta int
	}
	var edges []edge
	files, _ := os.ReadDir(spans)
	if len(files) != 6 {
		t.Fatalf("%d spans, want 6", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(spans, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var s, en float64
		fmt.Sscan(string(b), &s, &en)
		edges = append(edges, edge{s, 1}, edge{en, -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].t != edges[j].t {
			return edges[i].t < edges[j].t
		}
		return edges[i].delta < edges[j].delta
	})
	cur, peak := 0, 0
	for _, ed := range edges {
		cur += ed.delta
		peak = max(peak, cur)
	}
	if peak != 2 {
		t.Errorf("peak concurrency %d, want 2", peak)
	}
}

// TestCancelledKills: a rollout cancelled while its harness runs gets its
// heartbeat refused; the controller kills the harness and does not complete
// the attempt again.
func TestCancelledKills(t *testing.T) {
	e := newEnv(t, -1)
	pids := t.TempDir()
	ids := e.create(t, 1, store.RolloutConfig{}, `{}`)
	cfg := e.config("sh", "hang.sh")
	cfg.Env = []string{"PID_DIR=" + pids}
	start(t, cfg)
	r := waitAttempt(t, e, ids[0], pids)
	if _, err := e.st.CancelRollout(context.Background(), r.ID, "test cancel"); err != nil {
		t.Fatal(err)
	}
	aid := r.Attempts[0].ID
	for _, who := range []string{"harness", "grandchild"} {
		b, _ := os.ReadFile(filepath.Join(pids, aid+"."+who))
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		waitDead(t, who, pid)
	}
	time.Sleep(200 * time.Millisecond)
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.completes) != 0 || e.refused != 0 {
		t.Errorf("completions after cancel: %v, refused %d", e.completes, e.refused)
	}
}

// waitAttempt waits until the harness of the rollout's first attempt wrote
// its pids.
func waitAttempt(t *testing.T, e *env, id, pids string) store.Rollout {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		r, err := e.st.GetRollout(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Attempts) > 0 {
			if _, err := os.Stat(filepath.Join(pids, r.Attempts[0].ID+".harness")); err == nil {
				return r
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("harness did not start")
	return store.Rollout{}
}

// TestStopKillsAndRequeues: stopping the controller kills running harnesses
// and fails their attempts at once, so the rollouts are requeued.
func TestStopKillsAndRequeues(t *testing.T) {
	e := newEnv(t, -1)
	pids := t.TempDir()
	ids := e.create(t, 1, store.RolloutConfig{MaxAttempts: 3}, `{}`)
	cfg := e.config("sh", "hang.sh")
	cfg.Env = []string{"PID_DIR=" + pids}
	stop := start(t, cfg)
	r := waitAttempt(t, e, ids[0], pids)
	t0 := time.Now()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Errorf("Run took %s to return", d)
	}
	aid := r.Attempts[0].ID
	for _, who := range []string{"harness", "grandchild"} {
		b, _ := os.ReadFile(filepath.Join(pids, aid+"."+who))
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		waitDead(t, who, pid)
	}
	r, err := e.st.GetRollout(context.Background(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != store.RolloutRequeuing || r.Attempts[0].Status != store.AttemptFailed || r.Attempts[0].Error != "controller stopped" {
		t.Errorf("after stop: rollout %s, attempt %s %q", r.Status, r.Attempts[0].Status, r.Attempts[0].Error)
	}
	if !slices.ContainsFunc(e.events(t, r.ID, store.EventLog), func(ev store.Event) bool { return strings.Contains(string(ev.Data), "hanging") }) {
		t.Error("no stdout log event for the stopped attempt")
	}
}

// TestBadConfig: Run refuses a config it cannot run, and a wrong admin key.
func TestBadConfig(t *testing.T) {
	e := newEnv(t, -1)
	cases := []struct {
		name string
		mod  func(*controller.Config)
		want string
	}{
		{"empty program", func(c *controller.Config) { c.Command = []string{""} }, "program is empty"},
		{"no gateway", func(c *controller.Config) { c.GatewayURL = "" }, "no gateway URL"},
		{"bad mode", func(c *controller.Config) { c.Mode = "test" }, "mode"},
		{"bad env", func(c *controller.Config) { c.Env = []string{"NOEQUALS"} }, "KEY=VALUE"},
		{"wrong key", func(c *controller.Config) { c.AdminKey = "nope" }, "401"},
		{"bad sandbox harness", func(c *controller.Config) { c.Sandbox.Harness = "beside" }, "sandbox.harness \"beside\": want outside or inside"},
		{"relative read_only", func(c *controller.Config) { c.Sandbox.ReadOnly = []string{"opt"} }, "sandbox.read_only \"opt\""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := e.config("true")
			tc.mod(&cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := controller.Run(ctx, cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestBadRewardFile: an unreadable reward fails the attempt.
func TestBadRewardFile(t *testing.T) {
	e := newEnv(t, -1)
	ids := e.create(t, 1, store.RolloutConfig{}, `{}`)
	start(t, e.config("sh", "-c", `echo "great job" > "$AGL_REWARD_FILE"`))
	rs := e.wait(t, ids, 10*time.Second)
	if r := rs[0]; r.Status != store.RolloutFailed || !strings.Contains(r.Error, "reward file") {
		t.Errorf("rollout %s %q, want failed on the reward file", r.Status, r.Error)
	}
	e.checkOnce(t, rs)
}

// TestHeartbeatWithinUnresponsiveLimit: an attempt heartbeats often enough
// for its rollout's unresponsive_seconds even when HeartbeatInterval is
// longer, so the reaper leaves a slow but live harness alone.
func TestHeartbeatWithinUnresponsiveLimit(t *testing.T) {
	e := newEnv(t, 50*time.Millisecond)
	ids := e.create(t, 1, store.RolloutConfig{UnresponsiveSeconds: 0.3}, `{}`)
	cfg := e.config("sh", "-c", `sleep 1; echo 1 > "$AGL_REWARD_FILE"`)
	cfg.HeartbeatInterval = time.Minute
	start(t, cfg)
	rs := e.wait(t, ids, 10*time.Second)
	if r := rs[0]; r.Status != store.RolloutSucceeded || r.NumAttempts != 1 {
		t.Fatalf("rollout %s after %d attempts: %s", r.Status, r.NumAttempts, r.Error)
	}
	e.checkOnce(t, rs)
}

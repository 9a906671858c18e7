package trainer

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/samples"
	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/sqlite"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		err  string
	}{
		{"sync default", Config{}, ""},
		{"async default bound", Config{Mode: "async"}, ""},
		{"async bound", Config{Mode: "async", MaxStaleness: 3, OnStale: "keep", TISCap: 2}, ""},
		{"unknown mode", Config{Mode: "eager"}, "mode"},
		{"negative bound", Config{Mode: "async", MaxStaleness: -1}, "negative"},
		{"bound without async", Config{MaxStaleness: 2}, "needs mode: async"},
		{"unknown on_stale", Config{Mode: "async", OnStale: "skip"}, "on_stale"},
		{"negative tis cap", Config{TISCap: -1}, "tis_cap"},
		{"known names", Config{Estimator: "reinforce_pp_baseline", Aggregation: "token-mean", Credit: "discounted", Gamma: 0.9, TrainAgents: []string{"writer"}}, ""},
		{"unknown estimator", Config{Estimator: "drgrpo"}, `estimator "drgrpo"`},
		{"unknown aggregation", Config{Aggregation: "mean"}, `aggregation "mean"`},
		{"unknown credit", Config{Credit: "per-call"}, `credit assignment "per-call"`},
		{"gamma without discounted", Config{Credit: "per_call", Gamma: 0.5}, "needs credit: discounted"},
		{"gamma out of range", Config{Credit: "discounted", Gamma: 2}, "gamma"},
		{"bad agent", Config{TrainAgents: []string{"a b"}}, "train_agents"},
		{"unknown length rule", Config{LengthRule: "cut"}, `"cut"`},
		{"negative length", Config{MaxResponseLen: -5}, "negative"},
		{"ppo options", Config{PPOEpochs: 4, KLCoef: 0.05, KLK1: true, DualClip: 3}, ""},
		{"negative kl", Config{KLCoef: -0.1}, "kl_coef"},
		{"kl_k1 without kl", Config{KLK1: true}, "kl_k1 needs kl_coef"},
		{"dual clip ≤ 1", Config{DualClip: 0.5}, "dual_clip"},
		{"too many epochs", Config{PPOEpochs: 1000}, "ppo_epochs"},
		{"negative length penalty", Config{LengthPenalty: -0.1}, "length_penalty"},
		{"one filter attempt", Config{FilterAttempts: 1}, "filter_attempts"},
		{"filter attempts", Config{FilterAttempts: 4}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.WithDefaults().validate()
			if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("validate: %v, want %q", err, tc.err)
			}
		})
	}
	if c := (Config{Mode: "async"}).WithDefaults(); c.MaxStaleness != 1 || c.OnStale != StaleDrop {
		t.Errorf("async defaults: %+v", c)
	}
}

// TestSchedule checks which steps' groups exist while a step is awaited,
// and which tasks a step takes, also from a resumed state.
func TestSchedule(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		state State
		step  int
		last  int   // lastQueued(step)
		tasks []int // task indexes of plan(step)'s groups
	}{
		{"sync", Config{Steps: 5, TasksPerStep: 2}, State{}, 1, 1, []int{0, 1}},
		{"sync later step", Config{Steps: 5, TasksPerStep: 2}, State{}, 3, 3, []int{4, 5}},
		{"async 1", Config{Mode: "async", Steps: 5, TasksPerStep: 2}, State{}, 1, 2, []int{0, 1}},
		{"async 2", Config{Mode: "async", MaxStaleness: 2, Steps: 5, TasksPerStep: 2}, State{}, 2, 4, []int{2, 3}},
		{"async capped at the last step", Config{Mode: "async", MaxStaleness: 3, Steps: 5, TasksPerStep: 2}, State{}, 4, 5, []int{6, 7}},
		{"async last step", Config{Mode: "async", MaxStaleness: 3, Steps: 5, TasksPerStep: 2}, State{}, 5, 5, []int{8, 9}},
		{"resumed: cursor wraps", Config{Mode: "async", MaxStaleness: 2, Steps: 9, TasksPerStep: 3}, State{Step: 4, Cursor: 9}, 6, 8, []int{2, 3, 4}},
		{"resumed: next step", Config{Steps: 9, TasksPerStep: 3}, State{Step: 4, Cursor: 9}, 5, 5, []int{9, 0, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg.WithDefaults()
			cfg.GroupSize = 2
			l := &Loop{cfg: cfg, name: "run", state: tc.state}
			for i := 0; i < 10; i++ {
				l.train = append(l.train, json.RawMessage(strconv.Itoa(i)))
			}
			if got := cfg.lastQueued(tc.step); got != tc.last {
				t.Errorf("lastQueued(%d) = %d, want %d", tc.step, got, tc.last)
			}
			rs := l.plan(tc.step)
			if len(rs) != len(tc.tasks)*2 {
				t.Fatalf("%d rollouts", len(rs))
			}
			for i, r := range rs {
				k, j := i/2, i%2
				want := fmt.Sprintf("run-s%d-t%d-r%d", tc.step, k, j)
				if r.ID != want || r.GroupID != fmt.Sprintf("run-s%d-t%d", tc.step, k) || r.Mode != store.ModeTrain {
					t.Errorf("rollout %d: %s in %s, want %s", i, r.ID, r.GroupID, want)
				}
				if string(r.Task) != strconv.Itoa(tc.tasks[k]) {
					t.Errorf("%s: task %s, want %d", r.ID, r.Task, tc.tasks[k])
				}
			}
		})
	}
}

func TestInterrupted(t *testing.T) {
	att := func(n int, st store.AttemptStatus, msg string) store.Attempt {
		return store.Attempt{ID: fmt.Sprint("a", n), Number: n, Status: st, Error: msg}
	}
	tests := []struct {
		name string
		r    store.Rollout
		want bool
	}{
		{"controller stopped", store.Rollout{Status: store.RolloutFailed, Attempts: []store.Attempt{att(1, store.AttemptFailed, store.AttemptStopped)}}, true},
		{"orphan ended at resume", store.Rollout{Status: store.RolloutFailed, Attempts: []store.Attempt{att(1, store.AttemptFailed, Interrupted)}}, true},
		{"last attempt counts", store.Rollout{Status: store.RolloutFailed, Attempts: []store.Attempt{att(2, store.AttemptFailed, "exit status 1"), att(1, store.AttemptFailed, store.AttemptStopped)}}, false},
		{"harness failure", store.Rollout{Status: store.RolloutFailed, Attempts: []store.Attempt{att(1, store.AttemptFailed, "exit status 1")}}, false},
		{"unresponsive", store.Rollout{Status: store.RolloutFailed, Attempts: []store.Attempt{att(1, store.AttemptUnresponsive, "unresponsive: no heartbeat")}}, false},
		{"requeued: runs again anyway", store.Rollout{Status: store.RolloutRequeuing, Attempts: []store.Attempt{att(1, store.AttemptFailed, store.AttemptStopped)}}, false},
		{"succeeded", store.Rollout{Status: store.RolloutSucceeded, Attempts: []store.Attempt{att(1, store.AttemptSucceeded, "")}}, false},
		{"cancelled", store.Rollout{Status: store.RolloutCancelled}, false},
	}
	for _, tc := range tests {
		if got := interrupted(tc.r); got != tc.want {
			t.Errorf("%s: interrupted = %v", tc.name, got)
		}
	}
}

// rec is one token sequence a fake harness produced: the rollout (and
// controller) it belongs to and the version that served its call.
type rec struct {
	rollout string
	version int64
	by      string
}

// registry hands out a unique first token per generated sequence, so that
// what the policy trains can be traced back to rollouts.
type registry struct {
	mu   sync.Mutex
	next int32
	recs map[int32]rec
}

func (r *registry) add(x rec) int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.recs == nil {
		r.recs, r.next = map[int32]rec{}, 1000
	}
	r.next++
	r.recs[r.next] = x
	return r.next
}

func (r *registry) get(tok int32) rec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.recs[tok]
}

// behaviour is the log-prob fake harnesses record: it names the version.
func behaviour(version int64) float32 { return -float32(version) / 8 }

// fakeController claims rollouts and plays a one-call harness for each:
// the call is served by the publisher's version at that moment, with
// behaviour log-probs naming it; reward 1 for even slots, 0 for odd ones.
// Cancelling its context is a SIGKILL: calls in flight are abandoned.
type fakeController struct {
	name string
	st   store.Store
	pub  *fakePublisher
	reg  *registry
	// hang names rollouts whose harness never ends.
	hang func(id string) bool
	// reward, when set, replaces the even/odd slot reward.
	reward func(id string) float64
}

func (c *fakeController) start(ctx context.Context, t *testing.T) (wait func()) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, 4)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			slots <- struct{}{}
			cl, err := c.st.Claim(ctx, store.ClaimRequest{WorkerID: c.name})
			if err != nil {
				<-slots
				if !errors.Is(err, store.ErrNoneQueued) && ctx.Err() == nil {
					t.Errorf("claim: %v", err)
					return
				}
				time.Sleep(2 * time.Millisecond)
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				c.play(ctx, t, cl)
			}()
		}
	}()
	return wg.Wait
}

func (c *fakeController) play(ctx context.Context, t *testing.T, cl store.Claim) {
	id := cl.Rollout.ID
	v := c.pub.version.Load()
	time.Sleep(time.Millisecond)
	if c.hang != nil && c.hang(id) {
		<-ctx.Done()
	}
	if ctx.Err() != nil {
		return
	}
	tok := c.reg.add(rec{rollout: id, version: v, by: c.name})
	lp := behaviour(v)
	mc, _ := json.Marshal(api.ModelCall{CallID: "c1", ModelVersion: v, PromptIDs: []int32{tok, 7},
		ResponseIDs: []int32{8, 9}, ResponseLogprobs: []float32{lp, lp}})
	base, _, _ := strings.Cut(id, "~")
	j := base[len(base)-1] - '0'
	value := float64(1 - j%2)
	if c.reward != nil {
		value = c.reward(id)
	}
	rw, _ := json.Marshal(store.Reward{Value: &value})
	if _, err := c.st.AppendEvents(ctx, id, cl.Attempt.ID, []store.NewEvent{{Type: store.EventModelRequest, Data: mc}, {Type: store.EventReward, Data: rw}}); err != nil {
		if ctx.Err() == nil {
			t.Errorf("append %s: %v", id, err)
		}
		return
	}
	if _, err := c.st.CompleteAttempt(ctx, id, cl.Attempt.ID, store.AttemptSucceeded, ""); err != nil && ctx.Err() == nil {
		t.Errorf("complete %s: %v", id, err)
	}
}

type fakePublisher struct {
	version atomic.Int64
}

// row is one trained sequence: its first token and what the loss got.
type row struct {
	tok      int32
	behavior float32
}

// fakePolicy records what each update trained and publishes its version
// to pub.
type fakePolicy struct {
	pub     *fakePublisher
	mu      sync.Mutex
	updates [][]row
	onApply func(update int)
}

func (p *fakePolicy) Step(ctx context.Context, ss []samples.Sample) (StepStats, error) {
	var rows []row
	for _, s := range ss {
		if len(s.IDs) != 4 || len(s.Logprobs) != 4 || s.LossMask[2] != 1 {
			return StepStats{}, fmt.Errorf("unexpected sample %v mask %v", s.IDs, s.LossMask)
		}
		rows = append(rows, row{tok: s.IDs[0], behavior: s.Logprobs[2]})
	}
	p.mu.Lock()
	n := len(p.updates)
	p.updates = append(p.updates, rows)
	p.mu.Unlock()
	if p.onApply != nil {
		p.onApply(n + 1)
	}
	return StepStats{Loss: 1, GradNorm: 1, Tokens: 2 * len(ss)}, nil
}

func (p *fakePolicy) Publish(ctx context.Context, version int64) error {
	p.pub.version.Store(version)
	return nil
}

func (p *fakePolicy) SaveCheckpoint(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "model.safetensors"), nil, 0o644)
}

// one is a run's single unnamed policy.
func one(p Policy) []TrainedPolicy { return []TrainedPolicy{{Name: "agl", Policy: p}} }

// setup writes 10 tasks (8 train, 2 val) and opens a store.
func setup(t *testing.T) (dir string, st store.Store) {
	dir = t.TempDir()
	var b strings.Builder
	for i := 0; i < 10; i++ {
		fmt.Fprintf(&b, `{"n":%d}`+"\n", i)
	}
	if err := os.WriteFile(filepath.Join(dir, "tasks.jsonl"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "agl.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return dir, st
}

func readMetrics(t *testing.T, dir string) []StepMetrics {
	f, err := os.Open(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []StepMetrics
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m StepMetrics
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		if m.Mode == string(store.ModeTrain) {
			out = append(out, m)
		}
	}
	return out
}

// terminal waits until the rollouts of steps from..to, except those
// named in skip, are all terminal.
func terminal(ctx context.Context, st store.Store, from, to, tasks, group int, skip ...string) error {
	for s := from; s <= to; s++ {
		for k := 0; k < tasks; k++ {
			for j := 0; j < group; j++ {
				id := fmt.Sprintf("agl-s%d-t%d-r%d", s, k, j)
				for !slices.Contains(skip, id) {
					r, err := st.GetRollout(ctx, id)
					if err == nil && r.Status.Terminal() {
						break
					}
					if ctx.Err() != nil {
						return ctx.Err()
					}
					time.Sleep(2 * time.Millisecond)
				}
			}
		}
	}
	return nil
}

// TestLoopModes runs the loop against a fake harness and policy. In async
// mode each update waits until the next N steps' rollouts have finished:
// the loop must let them run meanwhile (overlap), so step t's samples are
// exactly min(t−1, N) versions stale. Every planned rollout is trained
// once, in its own step, with the behaviour log-probs its call recorded.
func TestLoopModes(t *testing.T) {
	const steps, tasks, group = 4, 2, 2
	tests := []struct {
		name string
		cfg  Config
	}{
		{"sync", Config{}},
		{"async 1", Config{Mode: "async", MaxStaleness: 1}},
		{"async 2", Config{Mode: "async", MaxStaleness: 2}},
		{"async 3, decoupled", Config{Mode: "async", MaxStaleness: 3, TISCap: 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, st := setup(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cfg := tc.cfg
			cfg.Tasks, cfg.Steps, cfg.TasksPerStep, cfg.GroupSize = filepath.Join(dir, "tasks.jsonl"), steps, tasks, group
			pub := &fakePublisher{}
			pub.version.Store(1)
			pol := &fakePolicy{pub: pub}
			n := cfg.MaxStaleness
			overlapped := 0
			pol.onApply = func(s int) {
				if n == 0 || s == steps {
					return
				}
				wctx, stop := context.WithTimeout(ctx, 10*time.Second)
				defer stop()
				if terminal(wctx, st, s+1, min(s+n, steps), tasks, group) == nil {
					overlapped++
				}
			}
			reg := &registry{}
			cctx, stopCtl := context.WithCancel(ctx)
			wait := (&fakeController{name: "c", st: st, pub: pub, reg: reg}).start(cctx, t)
			defer func() { stopCtl(); wait() }()
			l, err := New(cfg, st, one(pol), State{Version: 1}, dir, "agl", slog.New(slog.NewTextHandler(io.Discard, nil)), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			sum, err := l.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n > 0 && overlapped != steps-1 {
				t.Errorf("next steps' rollouts finished during %d of %d updates", overlapped, steps-1)
			}
			ms := readMetrics(t, dir)
			if len(ms) != steps || len(sum.Train) != steps {
				t.Fatalf("%d metrics lines, %d in summary", len(ms), len(sum.Train))
			}
			for _, m := range ms {
				want := int64(min(m.Step-1, n))
				if m.Rollouts != tasks*group || m.Failed != 0 || m.StalenessMax != want || m.StalenessMean != float64(want) || m.StaleSamples != 0 {
					t.Errorf("step %d: %d rollouts (%d failed), staleness %v/%d (want %d), stale samples %d",
						m.Step, m.Rollouts, m.Failed, m.StalenessMean, m.StalenessMax, want, m.StaleSamples)
				}
			}
			trained := map[string]int{}
			for u, rows := range pol.updates {
				for _, r := range rows {
					x := reg.get(r.tok)
					trained[x.rollout]++
					if !strings.HasPrefix(x.rollout, fmt.Sprintf("agl-s%d-", u+1)) {
						t.Errorf("update %d trained %s", u+1, x.rollout)
					}
					if r.behavior != behaviour(x.version) {
						t.Errorf("%s: behaviour log-prob %v, its call recorded %v", x.rollout, r.behavior, behaviour(x.version))
					}
				}
			}
			for s := 1; s <= steps; s++ {
				for _, r := range l.plan(s) {
					if trained[r.ID] != 1 {
						t.Errorf("%s trained %d times", r.ID, trained[r.ID])
					}
				}
			}
			if len(trained) != steps*tasks*group {
				t.Errorf("%d rollouts trained, want %d", len(trained), steps*tasks*group)
			}
			// No rollout of a step past the last was created.
			if _, err := st.GetRollout(ctx, fmt.Sprintf("agl-s%d-t0-r0", steps+1)); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("step %d rollouts exist: %v", steps+1, err)
			}
		})
	}
}

// TestLoopResume kills an async run (max_staleness 2, checkpoint every 2
// steps) while step 4 waits for a harness that hangs and steps 5 and 6 are
// already generated, then resumes it from the step-2 checkpoint: step 3
// (trained by the killed run past its checkpoint) is trained again from
// the same rollouts, steps 5 and 6 reuse what was generated ahead, the
// hung rollout runs again (requeued, or replaced when out of attempts),
// and every planned rollout is trained exactly once in the surviving run.
func TestLoopResume(t *testing.T) {
	const steps, tasks, group, hung = 6, 2, 2, "agl-s4-t0-r1"
	for _, attempts := range []int{1, 2} {
		t.Run(fmt.Sprintf("max_attempts %d", attempts), func(t *testing.T) {
			dir, st := setup(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cfg := Config{Mode: "async", MaxStaleness: 2, CheckpointEvery: 2, Tasks: filepath.Join(dir, "tasks.jsonl"),
				Steps: steps, TasksPerStep: tasks, GroupSize: group, Rollout: store.RolloutConfig{MaxAttempts: attempts}}
			quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
			reg := &registry{}

			// The run that gets killed.
			pub1 := &fakePublisher{}
			pol1 := &fakePolicy{pub: pub1}
			pub1.version.Store(1)
			kctx, kill := context.WithCancel(ctx)
			wait1 := (&fakeController{name: "first", st: st, pub: pub1, reg: reg, hang: func(id string) bool { return id == hung }}).start(kctx, t)
			l1, err := New(cfg, st, one(pol1), State{Version: 1}, dir, "agl", quiet, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			runErr := make(chan error, 1)
			go func() { _, err := l1.Run(kctx); runErr <- err }()
			for len(readMetricsIfAny(dir)) < 3 {
				time.Sleep(5 * time.Millisecond)
			}
			if err := terminal(ctx, st, 4, 6, tasks, group, hung); err != nil {
				t.Fatal(err)
			}
			kill()
			if err := <-runErr; !errors.Is(err, context.Canceled) {
				t.Fatalf("killed run: %v", err)
			}
			wait1()
			if len(pol1.updates) != 3 {
				t.Fatalf("killed run made %d updates, want 3", len(pol1.updates))
			}

			// Resume.
			n, err := EndOrphans(ctx, st)
			if err != nil || n != 1 {
				t.Fatalf("EndOrphans: %d, %v", n, err)
			}
			state, err := LoadState(CheckpointDir(dir))
			if err != nil || state.Step != 2 || state.Version != 3 {
				t.Fatalf("checkpoint %+v, %v", state, err)
			}
			pub2 := &fakePublisher{}
			pol2 := &fakePolicy{pub: pub2}
			pub2.version.Store(state.Version)
			wait2 := (&fakeController{name: "resumed", st: st, pub: pub2, reg: reg}).start(ctx, t)
			l2, err := New(cfg, st, one(pol2), state, dir, "agl", quiet, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l2.Run(ctx); err != nil {
				t.Fatal(err)
			}
			cancel()
			wait2()

			// The surviving lineage: the killed run's updates up to its
			// checkpoint, then the resumed run's.
			lineage := append(append([][]row{}, pol1.updates[:2]...), pol2.updates...)
			if len(lineage) != steps {
				t.Fatalf("%d updates in the surviving run", len(lineage))
			}
			trained := map[string]rec{}
			for u, rows := range lineage {
				for _, r := range rows {
					x := reg.get(r.tok)
					base, _, _ := strings.Cut(x.rollout, "~")
					if _, dup := trained[base]; dup {
						t.Errorf("%s trained twice", base)
					}
					trained[base] = x
					if !strings.HasPrefix(base, fmt.Sprintf("agl-s%d-", u+1)) {
						t.Errorf("step %d trained %s", u+1, x.rollout)
					}
				}
			}
			for s := 1; s <= steps; s++ {
				for _, r := range l2.plan(s) {
					x, ok := trained[r.ID]
					switch {
					case !ok:
						t.Errorf("%s never trained", r.ID)
					case r.ID == hung:
						want := hung
						if attempts == 1 {
							want += "~1"
						}
						if x.by != "resumed" || x.rollout != want {
							t.Errorf("hung rollout trained as %s generated by %s, want %s by the resumed run", x.rollout, x.by, want)
						}
					case s != 4 && x.by != "first":
						// Steps 3, 5, 6: generated before the kill, recovered.
						t.Errorf("%s generated again by the resumed run", r.ID)
					}
				}
			}
			// Step 3 trains the same rollouts in both runs.
			same := map[int32]bool{}
			for _, r := range pol1.updates[2] {
				same[r.tok] = true
			}
			for _, r := range pol2.updates[0] {
				if !same[r.tok] {
					t.Errorf("resumed step 3 trained %s, the killed run did not", reg.get(r.tok).rollout)
				}
			}
			ms := readMetrics(t, dir)
			if len(ms) != steps {
				t.Fatalf("%d train metrics lines, want %d", len(ms), steps)
			}
			for i, m := range ms {
				wantReplaced := 0
				if m.Step == 4 && attempts == 1 {
					wantReplaced = 1
				}
				if m.Step != i+1 || m.Rollouts != tasks*group || m.Failed != 0 || m.StalenessMax > 2 || m.StaleSamples != 0 || m.Replaced != wantReplaced {
					t.Errorf("metrics line %d: %+v", i, m)
				}
			}
		})
	}
}

func readMetricsIfAny(dir string) []string {
	b, _ := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	var train []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, `"mode":"train"`) {
			train = append(train, line)
		}
	}
	return train
}

// TestCheckPolicies: the loop refuses policies it cannot train.
func TestCheckPolicies(t *testing.T) {
	p := &fakePolicy{}
	tests := []struct {
		name string
		ps   []TrainedPolicy
		err  string
	}{
		{"one unnamed", []TrainedPolicy{{Name: "agl", Policy: p}}, ""},
		{"two named", []TrainedPolicy{{Name: "w", Agents: []string{"writer"}, Named: true, Policy: p}, {Name: "r", Agents: []string{"rewriter", ""}, Named: true, Policy: p}}, ""},
		{"none", nil, "no policy"},
		{"no implementation", []TrainedPolicy{{Name: "agl"}}, "no implementation"},
		{"unnamed beside named", []TrainedPolicy{{Name: "agl", Policy: p}, {Name: "w", Agents: []string{"writer"}, Named: true, Policy: p}}, "unnamed"},
		{"named without agents", []TrainedPolicy{{Name: "w", Named: true, Policy: p}}, "lists no agents"},
		{"same name", []TrainedPolicy{{Name: "w", Agents: []string{"a"}, Named: true, Policy: p}, {Name: "w", Agents: []string{"b"}, Named: true, Policy: p}}, `two policies named "w"`},
		{"shared agent", []TrainedPolicy{{Name: "w", Agents: []string{"a"}, Named: true, Policy: p}, {Name: "r", Agents: []string{"a"}, Named: true, Policy: p}}, `agent "a" is in policies`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkPolicies(tc.ps)
			if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("checkPolicies: %v, want %q", err, tc.err)
			}
		})
	}
}

package gateway_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/gateway"
	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/postgres"
	"github.com/aglrl/agl/store/postgres/pgtest"
)

// pausable is a gateway.LLM that only keeps its pause state and a count
// of calls in flight the test sets.
type pausable struct {
	mu       sync.Mutex
	paused   bool
	inflight int
}

func (p *pausable) setInFlight(n int) { p.mu.Lock(); p.inflight = n; p.mu.Unlock() }

func (p *pausable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if paused, _ := p.Status(); paused {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}
func (p *pausable) Pause()  { p.mu.Lock(); p.paused = true; p.mu.Unlock() }
func (p *pausable) Resume() { p.mu.Lock(); p.paused = false; p.mu.Unlock() }
func (p *pausable) Status() (bool, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused, p.inflight
}
func (p *pausable) Drain(ctx context.Context) error {
	for {
		if _, n := p.Status(); n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// replicas serves n gateways on one fresh PostgreSQL schema (startReplica)
// and returns their URLs and the schema's URL.
func replicas(tb testing.TB, n int, shared bool, waitPoll time.Duration) ([]string, string) {
	tb.Helper()
	u := pgtest.URL(tb)
	var urls []string
	for range n {
		url, _ := startReplica(tb, u, shared, waitPoll)
		urls = append(urls, url)
	}
	return urls, u
}

// startReplica serves a gateway on its own store on u, as a separate
// process has: shared says whether it gets the store's cross-replica side
// (Options.Shared), waitPoll is its poll fallback.
func startReplica(tb testing.TB, u string, shared bool, waitPoll time.Duration) (string, *pausable) {
	tb.Helper()
	st, err := postgres.Open(context.Background(), u)
	if err != nil {
		tb.Fatal(err)
	}
	llm := &pausable{}
	opt := gateway.Options{Store: st, AdminKey: admin, ReapInterval: -1, LLM: llm, WaitPoll: waitPoll}
	if shared {
		opt.Shared = st
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gateway.New(opt).Serve(c, ln, 5*time.Second, nil) }()
	tb.Cleanup(func() { cancel(); <-done; st.Close() })
	return "http://" + ln.Addr().String(), llm
}

// wakeOnce ends a rollout through replica a while a long-poll (wait 30s)
// waits on replica b, started delay before: it returns how long after the
// completion call began the long-poll returned, and how long the call took.
func wakeOnce(tb testing.TB, a, b *api.Client, id string, delay time.Duration) (wake, complete time.Duration) {
	tb.Helper()
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := a.CreateRollouts(c, []store.NewRollout{{ID: id}}); err != nil {
		tb.Fatal(err)
	}
	cl, ok, err := a.Claim(c, store.ClaimRequest{WorkerID: "w"})
	if err != nil || !ok {
		tb.Fatalf("claim: %v %v", ok, err)
	}
	_, after, err := b.Terminal(c, 0, 1000, 0)
	if err != nil {
		tb.Fatal(err)
	}
	woke := make(chan time.Time, 1)
	go func() {
		rs, _, err := b.Terminal(c, after, 1000, 30*time.Second)
		if err != nil || !slices.ContainsFunc(rs, func(r store.Rollout) bool { return r.ID == id }) {
			tb.Errorf("long-poll: %v %+v", err, rs)
		}
		woke <- time.Now()
	}()
	time.Sleep(delay) // the long-poll waits
	ended := time.Now()
	if _, err := a.Complete(c, cl.Rollout.ID, cl.Attempt.ID, store.AttemptSucceeded, ""); err != nil {
		tb.Fatal(err)
	}
	complete = time.Since(ended)
	return (<-woke).Sub(ended), complete
}

// TestTerminalWakesAcrossReplicas: a long-poll on one replica returns as
// soon as a rollout ends through another, though its poll fallback is an
// hour: the notification woke it.
func TestTerminalWakesAcrossReplicas(t *testing.T) {
	urls, _ := replicas(t, 2, true, time.Hour)
	a, b := api.NewClient(urls[0], admin), api.NewClient(urls[1], admin)
	if d, _ := wakeOnce(t, a, b, "r1", 30*time.Millisecond); d > 10*time.Second {
		t.Fatalf("the long-poll returned %v after the rollout ended", d)
	}
}

// TestPauseAcrossReplicas: pause through one replica pauses the other's
// LLM routes, resume through the other resumes both, within a second or
// so (a notification, or the pause watch's poll), and a replica started
// while paused starts paused.
func TestPauseAcrossReplicas(t *testing.T) {
	urls, u := replicas(t, 2, true, time.Hour)
	cs := []*api.Client{api.NewClient(urls[0], admin), api.NewClient(urls[1], admin)}
	c := ctx(t)
	eventually := func(i int, want bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			st, err := cs[i].Gateway(c)
			if err != nil {
				t.Fatal(err)
			}
			if st.Paused == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %d: paused=%v, want %v", i, st.Paused, want)
			}
		}
	}
	if _, err := cs[0].SetPaused(c, true); err != nil {
		t.Fatal(err)
	}
	eventually(1, true)
	if _, err := cs[1].SetPaused(c, false); err != nil {
		t.Fatal(err)
	}
	eventually(0, false)
	eventually(1, false)
	if _, err := cs[1].SetPaused(c, true); err != nil {
		t.Fatal(err)
	}
	eventually(0, true)
	third, _ := startReplica(t, u, true, time.Hour)
	cs = append(cs, api.NewClient(third, admin))
	eventually(2, true)
}

// TestDrainAcrossReplicas: a drain through one replica waits for the
// calls in flight on the others (their reports in the store), and GET
// /api/gateway lists the live replicas.
func TestDrainAcrossReplicas(t *testing.T) {
	u := pgtest.URL(t)
	urlA, llmA := startReplica(t, u, true, time.Hour)
	urlB, llmB := startReplica(t, u, true, time.Hour)
	a := api.NewClient(urlA, admin)
	c := ctx(t)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := a.Gateway(c)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Replicas) == 2 && st.Replica != "" && slices.ContainsFunc(st.Replicas, func(r store.Replica) bool { return r.ID == st.Replica }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas listed: %+v (this one %q), want both", st.Replicas, st.Replica)
		}
	}
	if _, err := a.SetPaused(c, true); err != nil {
		t.Fatal(err)
	}
	llmB.setInFlight(2)
	// 2 s, not less: the drain's first queries must finish within it on a
	// loaded machine for the answer to name the busy replica.
	_, err := a.Drain(c, 2*time.Second)
	if statusOf(err) != http.StatusServiceUnavailable || !strings.Contains(err.Error(), "another replica") || !strings.Contains(err.Error(), "2 calls in flight") {
		t.Fatalf("drain with calls in flight on B: %v", err)
	}
	llmA.setInFlight(0)
	go func() { time.Sleep(300 * time.Millisecond); llmB.setInFlight(0) }()
	start := time.Now()
	if _, err := api.NewClient(urlA, admin).Drain(c, 10*time.Second); err != nil {
		t.Fatalf("drain once B is idle: %v", err)
	}
	if time.Since(start) < 300*time.Millisecond {
		t.Fatal("the drain returned before B's calls ended")
	}
	_ = urlB
}

// BenchmarkCrossReplicaWake measures the time from a rollout ending
// through replica A to a long-poll on replica B returning: "notify" with
// LISTEN/NOTIFY (poll fallback an hour), "poll" without it (the 250ms
// poll a single-process store's gateway has). ms/wake is the median time
// from the completion call's start on A to B's answer; ms/complete the
// median of that call alone (the baseline: B cannot know sooner than A
// commits). The long-poll starts 30–280ms before the end, spread over the
// poll interval.
//
//	scripts/with-postgres.sh go test -run '^$' -bench CrossReplicaWake -benchtime 20x ./gateway/
func BenchmarkCrossReplicaWake(b *testing.B) {
	for _, bc := range []struct {
		name   string
		shared bool
		poll   time.Duration
	}{{"notify", true, time.Hour}, {"poll", false, 250 * time.Millisecond}} {
		b.Run(bc.name, func(b *testing.B) {
			urls, _ := replicas(b, 2, bc.shared, bc.poll)
			a, c := api.NewClient(urls[0], admin), api.NewClient(urls[1], admin)
			var wakes, completes []time.Duration
			for i := 0; b.Loop(); i++ {
				w, c := wakeOnce(b, a, c, fmt.Sprint("r", i), 30*time.Millisecond+time.Duration(i*37%250)*time.Millisecond)
				wakes, completes = append(wakes, w), append(completes, c)
			}
			median := func(ds []time.Duration) float64 {
				slices.Sort(ds)
				return float64(ds[len(ds)/2].Microseconds()) / 1000
			}
			b.ReportMetric(median(wakes), "ms/wake")
			b.ReportMetric(median(completes), "ms/complete")
			b.ReportMetric(0, "ns/op")
		})
	}
}

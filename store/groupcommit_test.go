package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aglrl/agl/store"
)

// memLog is a CommitFunc over an in-memory event log: it records each
// batch, can be slowed down, and can fail.
type memLog struct {
	mu      sync.Mutex
	events  []store.Event
	batches []int
	delay   time.Duration
	// fail, if set, decides a batch's transaction error.
	fail func(batch []*store.Append) error
	// refuse, if set, refuses an append on its own.
	refuse func(a *store.Append) error
	// gate, if set, is received from before each commit.
	gate chan struct{}
	// inCommit counts commits running at once; most is its maximum.
	inCommit atomic.Int32
	most     atomic.Int32
	overlap  atomic.Bool
}

func (m *memLog) commit(ctx context.Context, batch []*store.Append) error {
	n := m.inCommit.Add(1)
	if n > 1 {
		m.overlap.Store(true)
	}
	for {
		old := m.most.Load()
		if n <= old || m.most.CompareAndSwap(old, n) {
			break
		}
	}
	defer m.inCommit.Add(-1)
	if m.gate != nil {
		<-m.gate
	}
	if m.delay > 0 {
		time.Sleep(m.delay)
	}
	if m.fail != nil {
		if err := m.fail(batch); err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.batches = append(m.batches, len(batch))
	for _, a := range batch {
		if m.refuse != nil {
			if a.Err = m.refuse(a); a.Err != nil {
				continue
			}
		}
		out := make([]store.Event, len(a.Events))
		for i, e := range a.Events {
			out[i] = store.Event{Seq: int64(len(m.events) + 1), RolloutID: a.RolloutID, AttemptID: a.AttemptID, Type: e.Type, Data: e.Data}
			m.events = append(m.events, out[i])
		}
		a.Stored = out
	}
	return nil
}

func evs(n int, tag string) []store.NewEvent {
	out := make([]store.NewEvent, n)
	for i := range out {
		out[i] = store.NewEvent{Type: "log", Data: []byte(fmt.Sprintf(`"%s/%d"`, tag, i))}
	}
	return out
}

// TestGroupCommitConcurrent: many writers, each appending in sequence to
// its own attempt; every acked append is stored once, contiguous, in each
// writer's order, commits never overlap, and batching happens.
func TestGroupCommitConcurrent(t *testing.T) {
	m := &memLog{delay: 200 * time.Microsecond}
	g := store.NewGroupCommit(m.commit, store.GroupCommitOptions{})
	const writers, calls = 16, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last int64
			for c := range calls {
				out, err := g.Append(context.Background(), "r", fmt.Sprint("a", w), evs(1+c%3, fmt.Sprint(w, "/", c)))
				if err != nil {
					t.Error(err)
					return
				}
				for i, e := range out {
					if e.Seq <= last || (i > 0 && e.Seq != out[i-1].Seq+1) {
						t.Errorf("writer %d call %d: seq %d after %d", w, c, e.Seq, last)
					}
					if want := fmt.Sprintf(`"%d/%d/%d"`, w, c, i); string(e.Data) != want {
						t.Errorf("writer %d call %d event %d: %s, want %s", w, c, i, e.Data, want)
					}
					last = e.Seq
				}
			}
		}()
	}
	wg.Wait()
	g.Close()
	if m.overlap.Load() {
		t.Error("two transactions ran at once")
	}
	want := 0
	for c := range calls {
		want += writers * (1 + c%3)
	}
	if len(m.events) != want {
		t.Fatalf("%d events stored, want %d", len(m.events), want)
	}
	maxBatch := 0
	for _, n := range m.batches {
		maxBatch = max(maxBatch, n)
	}
	if maxBatch < 2 {
		t.Errorf("no batching: %d transactions for %d calls", len(m.batches), writers*calls)
	}
	t.Logf("%d calls in %d transactions (largest %d)", writers*calls, len(m.batches), maxBatch)
}

// TestGroupCommitInFlight: with MaxInFlight 3, up to three transactions
// run at once, never more, and every writer's calls are stored in order.
func TestGroupCommitInFlight(t *testing.T) {
	m := &memLog{delay: 300 * time.Microsecond}
	g := store.NewGroupCommit(m.commit, store.GroupCommitOptions{MaxInFlight: 3})
	const writers, calls = 16, 40
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last int64
			for c := range calls {
				out, err := g.Append(context.Background(), "r", fmt.Sprint("a", w), evs(2, fmt.Sprint(w, "/", c)))
				if err != nil {
					t.Error(err)
					return
				}
				if out[0].Seq <= last || out[1].Seq != out[0].Seq+1 {
					t.Errorf("writer %d call %d: seqs %d,%d after %d", w, c, out[0].Seq, out[1].Seq, last)
				}
				last = out[1].Seq
			}
		}()
	}
	wg.Wait()
	g.Close()
	if most := m.most.Load(); most > 3 || most < 2 {
		t.Errorf("%d transactions at once, want 2..3", most)
	}
	if len(m.events) != 2*writers*calls {
		t.Fatalf("%d events stored, want %d", len(m.events), 2*writers*calls)
	}
}

// TestGroupCommitFailure: a failed transaction fails every call of its
// batch, stores nothing of it, and later calls go on.
func TestGroupCommitFailure(t *testing.T) {
	gate := make(chan struct{})
	boom := errors.New("disk full")
	var failing atomic.Bool
	failing.Store(true)
	m := &memLog{gate: gate, fail: func([]*store.Append) error {
		if failing.Load() {
			return boom
		}
		return nil
	}}
	g := store.NewGroupCommit(m.commit, store.GroupCommitOptions{})
	// The first call commits alone and blocks on the gate; the next four
	// queue and form the second batch.
	results := make(chan error, 5)
	go func() { _, err := g.Append(context.Background(), "r", "a", evs(1, "first")); results <- err }()
	waitFor(t, func() bool { return m.inCommit.Load() == 1 })
	for i := range 4 {
		go func() { _, err := g.Append(context.Background(), "r", "a", evs(2, fmt.Sprint(i))); results <- err }()
	}
	waitFor(t, func() bool { return queued(g) == 4 })
	gate <- struct{}{} // first batch fails
	gate <- struct{}{} // second batch (4 calls) fails
	for range 5 {
		if err := <-results; !errors.Is(err, boom) {
			t.Fatalf("got %v, want the commit error", err)
		}
	}
	failing.Store(false)
	close(gate)
	if _, err := g.Append(context.Background(), "r", "a", evs(1, "later")); err != nil {
		t.Fatal(err)
	}
	if len(m.events) != 1 {
		t.Fatalf("%d events stored, want only the later one", len(m.events))
	}
}

// TestGroupCommitInvalidIsolated: a batch refused with ErrInvalid is
// retried call by call, so only the bad call fails.
func TestGroupCommitInvalidIsolated(t *testing.T) {
	gate := make(chan struct{})
	m := &memLog{gate: gate, fail: func(batch []*store.Append) error {
		for _, a := range batch {
			if a.AttemptID == "bad" {
				return store.Errorf(store.ErrInvalid, "NUL byte")
			}
		}
		return nil
	}}
	g := store.NewGroupCommit(m.commit, store.GroupCommitOptions{})
	results := make(chan error, 4)
	go func() { _, err := g.Append(context.Background(), "r", "first", evs(1, "f")); results <- err }()
	waitFor(t, func() bool { return m.inCommit.Load() == 1 })
	var errs [3]error
	var wg sync.WaitGroup
	for i, aid := range []string{"ok1", "bad", "ok2"} {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = g.Append(context.Background(), "r", aid, evs(1, aid)) }()
		waitFor(t, func() bool { return queued(g) == i+1 })
	}
	close(gate)
	wg.Wait()
	if err := <-results; err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], store.ErrInvalid) {
		t.Fatalf("errors %v, want only the bad call to fail", errs)
	}
	if len(m.events) != 3 {
		t.Fatalf("%d events stored, want 3", len(m.events))
	}
}

// TestGroupCommitRefusedAlone: an append refused by the backend (attempt
// not running) fails alone inside a committed batch.
func TestGroupCommitRefusedAlone(t *testing.T) {
	gate := make(chan struct{})
	m := &memLog{gate: gate, refuse: func(a *store.Append) error {
		if a.AttemptID == "ended" {
			return store.Errorf(store.ErrConflict, "attempt ended")
		}
		return nil
	}}
	g := store.NewGroupCommit(m.commit, store.GroupCommitOptions{})
	done := make(chan error, 1)
	go func() { _, err := g.Append(context.Background(), "r", "first", evs(1, "f")); done <- err }()
	waitFor(t, func() bool { return m.inCommit.Load() == 1 })
	var errs [2]error
	var outs [2][]store.Event
	var wg sync.WaitGroup
	for i, aid := range []string{"ended", "running"} {
		wg.Add(1)
		go func() { defer wg.Done(); outs[i], errs[i] = g.Append(context.Background(), "r", aid, evs(2, aid)) }()
		waitFor(t, func() bool { return queued(g) == i+1 })
	}
	close(gate)
	wg.Wait()
	<-done
	if !errors.Is(errs[0], store.ErrConflict) || outs[0] != nil {
		t.Errorf("ended attempt: %v %v", outs[0], errs[0])
	}
	if errs[1] != nil || len(outs[1]) != 2 {
		t.Errorf("running attempt: %v %v", outs[1], errs[1])
	}
	if len(m.batches) != 2 || m.batches[1] != 2 {
		t.Errorf("batches %v, want [1 2]", m.batches)
	}
}

// TestGroupCommitCancelWhileQueued: a call whose context ends while it
// waits in the queue is withdrawn and stores nothing.
func TestGroupCommitCancelWhileQueued(t *testing.T) {
	gate := make(chan struct{})
	m := &memLog{gate: gate}
	g := store.NewGroupCommit(m.commit, store.GroupCommitOptions{})
	done := make(chan error, 1)
	go func() { _, err := g.Append(context.Background(), "r", "a", evs(1, "first")); done <- err }()
	waitFor(t, func() bool { return m.inCommit.Load() == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	cerr := make(chan error, 1)
	go func() { _, err := g.Append(ctx, "r", "a", evs(1, "cancelled")); cerr <- err }()
	waitFor(t, func() bool { return queued(g) == 1 })
	cancel()
	if err := <-cerr; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	g.Close()
	if len(m.events) != 1 {
		t.Fatalf("%d events stored, want 1 (the cancelled call withdrawn)", len(m.events))
	}
}

// TestGroupCommitClose: Close waits for queued calls; later calls fail.
func TestGroupCommitClose(t *testing.T) {
	gate := make(chan struct{})
	m := &memLog{gate: gate}
	g := store.NewGroupCommit(m.commit, store.GroupCommitOptions{})
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := g.Append(context.Background(), "r", "a", evs(1, fmt.Sprint(i))); err != nil {
				t.Error(err)
			}
		}()
		waitFor(t, func() bool { return m.inCommit.Load() == 1 && queued(g) == i })
	}
	closed := make(chan struct{})
	go func() { g.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned with calls in flight")
	case <-time.After(20 * time.Millisecond):
	}
	close(gate)
	<-closed
	wg.Wait()
	if len(m.events) != 3 {
		t.Fatalf("%d events stored, want 3", len(m.events))
	}
	if _, err := g.Append(context.Background(), "r", "a", evs(1, "late")); !errors.Is(err, store.ErrStoreClosing) {
		t.Fatalf("append after Close: %v", err)
	}
}

// TestGroupCommitPanic: a panicking commit fails its batch with an error
// and does not wedge later calls.
func TestGroupCommitPanic(t *testing.T) {
	var once atomic.Bool
	m := &memLog{}
	g := store.NewGroupCommit(func(ctx context.Context, b []*store.Append) error {
		if once.CompareAndSwap(false, true) {
			panic("boom")
		}
		return m.commit(ctx, b)
	}, store.GroupCommitOptions{})
	func() {
		defer func() {
			if recover() == nil {
				t.Error("panic swallowed")
			}
		}()
		g.Append(context.Background(), "r", "a", evs(1, "x"))
	}()
	if _, err := g.Append(context.Background(), "r", "a", evs(1, "y")); err != nil {
		t.Fatal(err)
	}
}

// TestGroupCommitMaxEvents: a batch holds at most MaxEvents events (but
// always one call).
func TestGroupCommitMaxEvents(t *testing.T) {
	gate := make(chan struct{})
	m := &memLog{gate: gate}
	g := store.NewGroupCommit(m.commit, store.GroupCommitOptions{MaxEvents: 4})
	var wg sync.WaitGroup
	start := func(n int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := g.Append(context.Background(), "r", "a", evs(n, "x")); err != nil {
				t.Error(err)
			}
		}()
	}
	start(1)
	waitFor(t, func() bool { return m.inCommit.Load() == 1 })
	for i, n := range []int{3, 1, 9, 1} {
		start(n)
		waitFor(t, func() bool { return queued(g) == i+1 })
	}
	close(gate)
	wg.Wait()
	// 3+1 fill the second batch; 9 goes alone; 1 last.
	if fmt.Sprint(m.batches) != "[1 2 1 1]" {
		t.Errorf("batches %v, want [1 2 1 1]", m.batches)
	}
}

var queued = store.Queued

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

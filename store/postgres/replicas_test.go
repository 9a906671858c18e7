package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/postgres"
)

// twoReplicas opens two stores on one schema, as two gateway replicas do.
func twoReplicas(t *testing.T) (*postgres.Store, *postgres.Store, string) {
	t.Helper()
	u := testURL(t)
	var out [2]*postgres.Store
	for i := range out {
		s, err := postgres.Open(bg, u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		out[i] = s
	}
	return out[0], out[1], u
}

// woken reports whether ch is closed within d.
func woken(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// listening waits until b's listener is connected (its first Changed
// channel is closed once LISTEN ran) and returns a fresh channel.
func listening(t *testing.T, b *postgres.Store) <-chan struct{} {
	t.Helper()
	if !woken(b.Changed(), 10*time.Second) {
		t.Fatal("the listener never connected")
	}
	return b.Changed()
}

// TestChangedAcrossStores: a write on one store wakes the other's
// waiters (LISTEN/NOTIFY), for each kind of write that can end a wait;
// an event append (no state change) and a write in another schema of the
// same database do not.
func TestChangedAcrossStores(t *testing.T) {
	a, b, _ := twoReplicas(t)
	other := newTestStore(t) // another schema, same database
	ch := listening(t, b)
	mustCreate(t, other, store.NewRollout{ID: "elsewhere", Task: task(0)})
	if woken(ch, 300*time.Millisecond) {
		t.Fatal("a write in another schema woke this one")
	}
	var cl store.Claim
	steps := []struct {
		name  string
		write func() error
		wakes bool
	}{
		{"create", func() error {
			_, err := a.CreateRollouts(bg, []store.NewRollout{{ID: "r1", Task: task(1)}})
			return err
		}, true},
		{"claim+events", func() error {
			var err error
			if cl, err = a.Claim(bg, store.ClaimRequest{WorkerID: "w"}); err != nil {
				return err
			}
			_, err = a.AppendEvents(bg, cl.Rollout.ID, cl.Attempt.ID, []store.NewEvent{{Type: store.EventLog, Data: json.RawMessage(`"x"`)}})
			return err
		}, false},
		{"complete", func() error {
			_, err := a.CompleteAttempt(bg, cl.Rollout.ID, cl.Attempt.ID, store.AttemptSucceeded, "")
			return err
		}, true},
		{"create again", func() error {
			_, err := a.CreateRollouts(bg, []store.NewRollout{{ID: "r2", Task: task(2)}})
			return err
		}, true},
		{"cancel", func() error { _, err := a.CancelRollout(bg, "r2", "test"); return err }, true},
		{"model", func() error { _, err := a.RegisterModel(bg, store.Model{Name: "m"}); return err }, true},
		{"setting", func() error { return a.PutSetting(bg, "pause", json.RawMessage(`{"paused":true}`)) }, true},
	}
	for _, st := range steps {
		ch := b.Changed()
		if err := st.write(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		// Generous bound for a wake-up; the no-wake case waits a while
		// for a notification that must not come.
		if got := woken(ch, map[bool]time.Duration{true: 10 * time.Second, false: 300 * time.Millisecond}[st.wakes]); got != st.wakes {
			t.Errorf("%s: woke %v, want %v", st.name, got, st.wakes)
		}
	}
}

// TestChangedReconnects: when the listening connection is killed, the
// store reconnects and wakes its waiters (a change may have been missed),
// then delivers notifications again.
func TestChangedReconnects(t *testing.T) {
	a, b, _ := twoReplicas(t)
	ch := listening(t, b)
	// Kill b's listening connection from a.
	tag, err := a.Pool().Exec(bg, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = $1 AND pid <> pg_backend_pid() AND datname = current_database()`, postgres.ListenerName)
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() == 0 {
		t.Fatal("no listening connection to kill")
	}
	if !woken(ch, 10*time.Second) {
		t.Fatal("losing the listening connection woke nobody")
	}
	// Back: a later write is delivered.
	ch = listening(t, b)
	if err := a.PutSetting(bg, "x", json.RawMessage(`1`)); err != nil {
		t.Fatal(err)
	}
	if !woken(ch, 10*time.Second) {
		t.Fatal("no notification after reconnecting")
	}
}

func TestSettings(t *testing.T) {
	a, b, _ := twoReplicas(t)
	if v, ver, err := b.Setting(bg, "pause"); err != nil || v != nil || ver != 0 {
		t.Fatalf("unset setting: %s %d %v", v, ver, err)
	}
	for i, val := range []string{`{"paused":true}`, `{"paused":false}`} {
		if err := a.PutSetting(bg, "pause", json.RawMessage(val)); err != nil {
			t.Fatal(err)
		}
		v, ver, err := b.Setting(bg, "pause")
		if err != nil || string(v) != val || ver != int64(i+1) {
			t.Fatalf("after put %d: %s %d %v", i, v, ver, err)
		}
	}
	for _, tc := range []struct{ name, val string }{{"", `1`}, {"x", `{nope`}} {
		if err := a.PutSetting(bg, tc.name, json.RawMessage(tc.val)); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("PutSetting(%q, %s) = %v, want invalid", tc.name, tc.val, err)
		}
	}
}

// TestWatchSetting: a replica applies a setting put on another one, the
// current value at start and each later put once.
func TestWatchSetting(t *testing.T) {
	a, b, _ := twoReplicas(t)
	if err := a.PutSetting(bg, "pause", json.RawMessage(`"first"`)); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 10)
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	// A poll interval far longer than the test: only notifications apply
	// the later puts in time.
	go store.WatchSetting(ctx, b, "pause", time.Hour, func(v json.RawMessage) { got <- string(v) })
	next := func() string {
		select {
		case v := <-got:
			return v
		case <-time.After(10 * time.Second):
			return "(nothing applied)"
		}
	}
	if v := next(); v != `"first"` {
		t.Fatalf("applied at start: %s", v)
	}
	listening(t, b)
	for _, val := range []string{`"second"`, `"third"`} {
		if err := a.PutSetting(bg, "pause", json.RawMessage(val)); err != nil {
			t.Fatal(err)
		}
		if v := next(); v != val {
			t.Fatalf("applied %s, want %s", v, val)
		}
	}
	// A wake-up without a new version applies nothing.
	if _, err := a.CreateRollouts(bg, []store.NewRollout{{ID: "r", Task: task(0)}}); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-got:
		t.Fatalf("applied %s again without a put", v)
	case <-time.After(300 * time.Millisecond):
	}
}

// TestReapOncePerPass: two replicas reaping at once end each stale
// attempt once in all; while one holds the reaper's lock, the other's
// pass does nothing.
func TestReapOncePerPass(t *testing.T) {
	a, b, u := twoReplicas(t)
	const n = 8
	var rs []store.NewRollout
	for i := range n {
		rs = append(rs, store.NewRollout{ID: "r" + string(rune('a'+i)), Task: task(i), Config: store.RolloutConfig{UnresponsiveSeconds: 1, MaxAttempts: 1}})
	}
	mustCreate(t, a, rs...)
	for range n {
		mustClaim(t, a)
	}
	later := time.Now().Add(time.Minute)

	// Another session holds the lock: neither replica reaps.
	conn, err := pgx.Connect(bg, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(bg)
	if _, err := conn.Exec(bg, "SELECT pg_advisory_lock($1, hashtext(current_schema()))", int32(postgres.ReapLock)); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*postgres.Store{a, b} {
		if res, err := s.Reap(bg, later); err != nil || res != (store.ReapResult{}) {
			t.Fatalf("reap while locked elsewhere: %+v %v", res, err)
		}
	}
	if c, err := a.CountRollouts(bg); err != nil || c[store.RolloutRunning] != n {
		t.Fatalf("counts while locked: %v %v", c, err)
	}
	if _, err := conn.Exec(bg, "SELECT pg_advisory_unlock($1, hashtext(current_schema()))", int32(postgres.ReapLock)); err != nil {
		t.Fatal(err)
	}

	// Both at once, repeatedly: the stale attempts are counted once.
	var mu sync.Mutex
	var total store.ReapResult
	var wg sync.WaitGroup
	for _, s := range []*postgres.Store{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := s.Reap(bg, later)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			total.Unresponsive += res.Unresponsive
			total.Failed += res.Failed
			total.Requeued += res.Requeued
			total.TimedOut += res.TimedOut
			mu.Unlock()
		}()
	}
	wg.Wait()
	if total != (store.ReapResult{Unresponsive: n, Failed: n}) {
		t.Fatalf("reaped in all %+v, want %d unresponsive and failed once each", total, n)
	}
	if c, err := b.CountRollouts(bg); err != nil || c[store.RolloutFailed] != n {
		t.Fatalf("counts after reaping: %v %v", c, err)
	}
	// The lock was released: a later pass runs (nothing left to reap).
	if _, err := conn.Exec(bg, "SELECT pg_advisory_lock($1, hashtext(current_schema()))", int32(postgres.ReapLock)); err != nil {
		t.Fatal(err)
	}
}

// TestReplicaReports: reports count up per replica, list by recency and
// are forgotten on delete.
func TestReplicaReports(t *testing.T) {
	a, b, _ := twoReplicas(t)
	for i := range 3 {
		if err := a.PutReplica(bg, store.Replica{ID: "gw-a", InFlight: i, Paused: i == 2}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.PutReplica(bg, store.Replica{ID: "gw-b"}); err != nil {
		t.Fatal(err)
	}
	rs, err := b.Replicas(bg, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].ID != "gw-a" || rs[0].Reports != 3 || rs[0].InFlight != 2 || !rs[0].Paused || rs[1].ID != "gw-b" || rs[1].Reports != 1 || rs[0].SeenAt.IsZero() {
		t.Fatalf("replicas %+v", rs)
	}
	time.Sleep(50 * time.Millisecond)
	if rs, err := b.Replicas(bg, 10*time.Millisecond); err != nil || len(rs) != 0 {
		t.Fatalf("replicas seen within 10ms: %+v %v", rs, err)
	}
	if err := a.DeleteReplica(bg, "gw-a"); err != nil {
		t.Fatal(err)
	}
	if rs, err := b.Replicas(bg, time.Minute); err != nil || len(rs) != 1 || rs[0].ID != "gw-b" {
		t.Fatalf("after delete: %+v %v", rs, err)
	}
	if err := a.PutReplica(bg, store.Replica{}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("empty id: %v", err)
	}
}

package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/postgres"
)

var bg = context.Background()

func mustCreate(t *testing.T, s *postgres.Store, rs ...store.NewRollout) []store.Rollout {
	t.Helper()
	out, err := s.CreateRollouts(bg, rs)
	if err != nil {
		t.Fatalf("CreateRollouts: %v", err)
	}
	return out
}

func mustClaim(t *testing.T, s *postgres.Store) store.Claim {
	t.Helper()
	c, err := s.Claim(bg, store.ClaimRequest{WorkerID: "w"})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return c
}

func task(n int) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)) }

func TestCreateRollouts(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	// Key order and spacing must survive: the task is stored as given.
	raw := json.RawMessage(`{ "z": 1,  "a": [true, null] }`)
	rs := mustCreate(t, s,
		store.NewRollout{ID: "r1", GroupID: "g", Task: raw, Metadata: json.RawMessage(`{"k":"v"}`)},
		store.NewRollout{Task: task(2), Mode: store.ModeVal, Config: store.RolloutConfig{MaxAttempts: 3, TimeoutSeconds: 5}},
	)
	if len(rs) != 2 {
		t.Fatalf("got %d rollouts", len(rs))
	}
	r1 := rs[0]
	if r1.ID != "r1" || r1.GroupID != "g" || string(r1.Task) != string(raw) || string(r1.Metadata) != `{"k":"v"}` {
		t.Errorf("r1 = %+v", r1)
	}
	if r1.Mode != store.ModeTrain || r1.Status != store.RolloutQueuing || r1.Config.MaxAttempts != 1 || r1.Config.UnresponsiveSeconds != 60 {
		t.Errorf("defaults not applied: %+v", r1)
	}
	if rs[1].ID == "" || rs[1].Seq <= r1.Seq || rs[1].Mode != store.ModeVal || rs[1].Config.MaxAttempts != 3 || rs[1].Config.TimeoutSeconds != 5 {
		t.Errorf("r2 = %+v", rs[1])
	}
	if r1.CreatedAt.IsZero() || r1.CreatedAt.Location() != time.UTC {
		t.Errorf("created_at = %v", r1.CreatedAt)
	}

	// Idempotent: the same id returns the stored rollout unchanged, also
	// when repeated inside one batch.
	again := mustCreate(t, s, store.NewRollout{ID: "r1", Task: task(99)}, store.NewRollout{ID: "r3", Task: task(3)}, store.NewRollout{ID: "r3", Task: task(4)})
	if string(again[0].Task) != string(raw) || again[0].Seq != r1.Seq {
		t.Errorf("repeated id returned %+v, want the stored rollout", again[0])
	}
	if again[1].Seq != again[2].Seq || string(again[2].Task) != `{"n":3}` {
		t.Errorf("repeat in batch: %+v vs %+v", again[1], again[2])
	}
	got, err := s.GetRollout(bg, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Task) != string(raw) || !got.CreatedAt.Equal(r1.CreatedAt) || len(got.Attempts) != 0 {
		t.Errorf("GetRollout = %+v", got)
	}
	if _, err := s.GetRollout(bg, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetRollout(nope) = %v, want ErrNotFound", err)
	}
	if empty, err := s.CreateRollouts(bg, nil); err != nil || len(empty) != 0 {
		t.Errorf("CreateRollouts(nil) = %v, %v", empty, err)
	}
}

func TestCreateRolloutsInvalid(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	tests := []struct {
		name string
		nr   store.NewRollout
		want string
	}{
		{"bad task", store.NewRollout{Task: json.RawMessage(`{"a":`)}, "task is not valid JSON"},
		{"bad metadata", store.NewRollout{Task: task(1), Metadata: json.RawMessage(`nope`)}, "metadata"},
		{"bad mode", store.NewRollout{Task: task(1), Mode: "test"}, `mode "test"`},
		{"negative timeout", store.NewRollout{Task: task(1), Config: store.RolloutConfig{TimeoutSeconds: -1}}, "must not be negative"},
		{"nan unresponsive", store.NewRollout{Task: task(1), Config: store.RolloutConfig{UnresponsiveSeconds: math.NaN()}}, "unresponsive_seconds"},
		{"negative attempts", store.NewRollout{Task: task(1), Config: store.RolloutConfig{MaxAttempts: -2}}, "must not be negative"},
		{"long id", store.NewRollout{ID: strings.Repeat("x", 300), Task: task(1)}, "1 to 200 bytes"},
		{"nul id", store.NewRollout{ID: "a\x00b", Task: task(1)}, "outside the id alphabet"},
		{"bad utf8 group", store.NewRollout{GroupID: "\xff", Task: task(1)}, "group_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A bad rollout fails the whole batch: nothing is created.
			ok := store.IDSafe("ok-" + tc.name)
			_, err := s.CreateRollouts(bg, []store.NewRollout{{ID: ok, Task: task(0)}, tc.nr})
			if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalid mentioning %q", err, tc.want)
			}
			if _, err := s.GetRollout(bg, ok); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("batch not atomic: %v", err)
			}
		})
	}
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	mustCreate(t, s, store.NewRollout{ID: "r", Task: task(1)})
	c := mustClaim(t, s)
	if c.Rollout.ID != "r" || c.Rollout.Status != store.RolloutRunning || c.Rollout.NumAttempts != 1 {
		t.Fatalf("claimed rollout %+v", c.Rollout)
	}
	a := c.Attempt
	if a.RolloutID != "r" || a.Number != 1 || a.Status != store.AttemptRunning || a.WorkerID != "w" || a.ID == "" {
		t.Fatalf("attempt %+v", a)
	}
	if !strings.HasPrefix(c.Key, store.KeyPrefix) || len(c.Key) < len(store.KeyPrefix)+40 {
		t.Fatalf("key %q", c.Key)
	}
	if _, err := s.Claim(bg, store.ClaimRequest{}); !errors.Is(err, store.ErrNoneQueued) {
		t.Fatalf("second claim: %v, want ErrNoneQueued", err)
	}

	// Scoped key.
	if got, err := s.AttemptByKey(bg, "r", a.ID, c.Key); err != nil || got.ID != a.ID {
		t.Fatalf("AttemptByKey: %+v, %v", got, err)
	}
	for _, k := range []struct{ r, a, key string }{
		{"r", a.ID, c.Key + "x"},
		{"r", a.ID, ""},
		{"r", "other", c.Key},
		{"other", a.ID, c.Key},
	} {
		if _, err := s.AttemptByKey(bg, k.r, k.a, k.key); !errors.Is(err, store.ErrForbidden) {
			t.Errorf("AttemptByKey(%q, %q, %q) = %v, want ErrForbidden", k.r, k.a, k.key, err)
		}
	}

	time.Sleep(2 * time.Millisecond)
	hb, err := s.Heartbeat(bg, "r", a.ID)
	if err != nil || !hb.LastHeartbeat.After(a.LastHeartbeat) {
		t.Fatalf("Heartbeat: %+v, %v", hb, err)
	}

	evs, err := s.AppendEvents(bg, "r", a.ID, []store.NewEvent{
		{Type: store.EventModelRequest, Data: json.RawMessage(`{"call_id":"c1"}`)},
		{Type: store.EventReward, Data: json.RawMessage(`0.25`)},
		{Type: store.EventReward, Data: json.RawMessage(`{"value":0.5,"call_id":"c1"}`)}, // intermediate
		{Type: "custom", Time: time.Date(2020, 1, 2, 3, 4, 5, 6789, time.UTC), Data: json.RawMessage(`[1, 2]`)},
		{Type: store.EventReward, Data: json.RawMessage(`{"values":{"acc":1,"len":-2},"primary":"acc"}`)},
		{Type: store.EventLog},
	})
	if err != nil {
		t.Fatalf("AppendEvents: %v", err)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Seq <= evs[i-1].Seq {
			t.Fatalf("seqs not increasing: %+v", evs)
		}
	}
	if !evs[3].Time.Equal(time.Date(2020, 1, 2, 3, 4, 5, 6000, time.UTC)) || string(evs[5].Data) != "null" {
		t.Errorf("events = %+v", evs)
	}
	listed, err := s.ListEvents(bg, store.EventFilter{RolloutID: "r"})
	if err != nil || len(listed) != len(evs) {
		t.Fatalf("ListEvents: %d, %v", len(listed), err)
	}
	for i := range evs {
		if listed[i].Seq != evs[i].Seq || !listed[i].Time.Equal(evs[i].Time) || string(listed[i].Data) != string(evs[i].Data) || listed[i].Type != evs[i].Type || listed[i].AttemptID != a.ID {
			t.Errorf("listed[%d] = %+v, appended %+v", i, listed[i], evs[i])
		}
	}
	rewards, err := s.ListEvents(bg, store.EventFilter{RolloutID: "r", Types: []string{store.EventReward}, AfterSeq: evs[1].Seq, Limit: 1})
	if err != nil || len(rewards) != 1 || rewards[0].Seq != evs[2].Seq {
		t.Errorf("filtered ListEvents = %+v, %v", rewards, err)
	}

	r, err := s.CompleteAttempt(bg, "r", a.ID, store.AttemptSucceeded, "")
	if err != nil {
		t.Fatalf("CompleteAttempt: %v", err)
	}
	if r.Status != store.RolloutSucceeded || r.TerminalSeq == 0 || r.Reward == nil || *r.Reward != 1 ||
		string(r.RewardData) != `{"values":{"acc":1,"len":-2},"primary":"acc"}` {
		t.Fatalf("completed rollout %+v", r)
	}
	got, err := s.GetRollout(bg, "r")
	if err != nil || len(got.Attempts) != 1 || got.Attempts[0].Status != store.AttemptSucceeded || got.Attempts[0].EndedAt == nil {
		t.Fatalf("GetRollout after completion: %+v, %v", got, err)
	}
	term, err := s.Terminal(bg, 0, 10)
	if err != nil || len(term) != 1 || term[0].ID != "r" || term[0].TerminalSeq != r.TerminalSeq {
		t.Fatalf("Terminal = %+v, %v", term, err)
	}
	if more, err := s.Terminal(bg, r.TerminalSeq, 10); err != nil || len(more) != 0 {
		t.Fatalf("Terminal after cursor = %+v, %v", more, err)
	}
}

func TestIllegalTransitions(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	mustCreate(t, s, store.NewRollout{ID: "done", Task: task(1)}, store.NewRollout{ID: "queued", Task: task(2)})
	c := mustClaim(t, s)
	if _, err := s.CompleteAttempt(bg, "done", c.Attempt.ID, store.AttemptSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	aid := c.Attempt.ID
	tests := []struct {
		name string
		call func() error
		kind error
		want string
	}{
		{"complete twice", func() error {
			_, err := s.CompleteAttempt(bg, "done", aid, store.AttemptFailed, "x")
			return err
		}, store.ErrConflict, "attempt " + aid + " is succeeded, not running"},
		{"heartbeat ended", func() error { _, err := s.Heartbeat(bg, "done", aid); return err }, store.ErrConflict, "is succeeded, not running"},
		{"append ended", func() error {
			_, err := s.AppendEvents(bg, "done", aid, []store.NewEvent{{Type: "log"}})
			return err
		}, store.ErrConflict, "not running"},
		{"cancel terminal", func() error { _, err := s.CancelRollout(bg, "done", ""); return err }, store.ErrConflict, "rollout done is succeeded"},
		{"complete bad status", func() error {
			_, err := s.CompleteAttempt(bg, "done", aid, store.AttemptTimeout, "")
			return err
		}, store.ErrInvalid, `"timeout"`},
		{"complete unknown attempt", func() error {
			_, err := s.CompleteAttempt(bg, "done", "nope", store.AttemptSucceeded, "")
			return err
		}, store.ErrNotFound, "attempt nope"},
		{"complete unknown rollout", func() error {
			_, err := s.CompleteAttempt(bg, "nope", aid, store.AttemptSucceeded, "")
			return err
		}, store.ErrNotFound, "rollout nope"},
		{"attempt of other rollout", func() error { _, err := s.Heartbeat(bg, "queued", aid); return err }, store.ErrNotFound, "attempt"},
		{"append unknown rollout", func() error {
			_, err := s.AppendEvents(bg, "nope", aid, []store.NewEvent{{Type: "log"}})
			return err
		}, store.ErrNotFound, "rollout nope"},
		{"append no type", func() error {
			_, err := s.AppendEvents(bg, "done", aid, []store.NewEvent{{Data: json.RawMessage(`1`)}})
			return err
		}, store.ErrInvalid, "type is empty"},
		{"append bad json", func() error {
			_, err := s.AppendEvents(bg, "done", aid, []store.NewEvent{{Type: "log", Data: json.RawMessage(`{`)}})
			return err
		}, store.ErrInvalid, "not valid JSON"},
		{"cancel unknown", func() error { _, err := s.CancelRollout(bg, "nope", ""); return err }, store.ErrNotFound, "rollout nope"},
		{"events unknown rollout", func() error { _, err := s.ListEvents(bg, store.EventFilter{RolloutID: "nope"}); return err }, store.ErrNotFound, "rollout nope"},
		{"events no rollout", func() error { _, err := s.ListEvents(bg, store.EventFilter{}); return err }, store.ErrInvalid, "rollout id"},
		{"claim bad mode", func() error { _, err := s.Claim(bg, store.ClaimRequest{Mode: "x"}); return err }, store.ErrInvalid, "mode"},
		{"list bad status", func() error {
			_, _, err := s.ListRollouts(bg, store.RolloutFilter{Status: []store.RolloutStatus{"nah"}})
			return err
		}, store.ErrInvalid, `"nah"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %v mentioning %q", err, tc.kind, tc.want)
			}
		})
	}
}

func TestRetriesAndCancel(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	mustCreate(t, s, store.NewRollout{ID: "r", Task: task(1), Config: store.RolloutConfig{MaxAttempts: 2}})
	c1 := mustClaim(t, s)
	r, err := s.CompleteAttempt(bg, "r", c1.Attempt.ID, store.AttemptFailed, "boom 1")
	if err != nil || r.Status != store.RolloutRequeuing || r.TerminalSeq != 0 {
		t.Fatalf("after first failure: %+v, %v", r, err)
	}
	c2 := mustClaim(t, s)
	if c2.Rollout.ID != "r" || c2.Attempt.Number != 2 || c2.Key == c1.Key || c2.Attempt.ID == c1.Attempt.ID {
		t.Fatalf("second claim %+v", c2)
	}
	// The first attempt's key no longer grants the second attempt.
	if _, err := s.AttemptByKey(bg, "r", c2.Attempt.ID, c1.Key); !errors.Is(err, store.ErrForbidden) {
		t.Errorf("old key on new attempt: %v", err)
	}
	r, err = s.CompleteAttempt(bg, "r", c2.Attempt.ID, store.AttemptFailed, "boom 2")
	if err != nil || r.Status != store.RolloutFailed || r.Error != "attempt 2 of 2 boom 2" || r.TerminalSeq == 0 || r.Reward != nil {
		t.Fatalf("after second failure: %+v, %v", r, err)
	}

	// Cancel a running rollout: its attempt fails with the reason.
	mustCreate(t, s, store.NewRollout{ID: "c", Task: task(2)})
	c3 := mustClaim(t, s)
	r, err = s.CancelRollout(bg, "c", "operator said so")
	if err != nil || r.Status != store.RolloutCancelled || r.Error != "cancelled: operator said so" || r.TerminalSeq == 0 {
		t.Fatalf("cancel: %+v, %v", r, err)
	}
	got, _ := s.GetRollout(bg, "c")
	if got.Attempts[0].Status != store.AttemptFailed || got.Attempts[0].Error != "cancelled: operator said so" {
		t.Errorf("cancelled attempt: %+v", got.Attempts[0])
	}
	if _, err := s.AppendEvents(bg, "c", c3.Attempt.ID, []store.NewEvent{{Type: "log"}}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("append after cancel: %v", err)
	}
	// Cancel a queued one.
	mustCreate(t, s, store.NewRollout{ID: "q", Task: task(3)})
	if r, err := s.CancelRollout(bg, "q", ""); err != nil || r.Status != store.RolloutCancelled {
		t.Fatalf("cancel queued: %+v, %v", r, err)
	}
	if _, err := s.Claim(bg, store.ClaimRequest{}); !errors.Is(err, store.ErrNoneQueued) {
		t.Errorf("claim after cancel: %v", err)
	}
	counts, err := s.CountRollouts(bg)
	if err != nil || counts[store.RolloutFailed] != 1 || counts[store.RolloutCancelled] != 2 || counts[store.RolloutQueuing] != 0 {
		t.Errorf("counts = %v, %v", counts, err)
	}
	term, err := s.Terminal(bg, 0, 0)
	if err != nil || len(term) != 3 || term[0].ID != "r" || term[1].ID != "c" || term[2].ID != "q" {
		t.Errorf("terminal order: %+v, %v", term, err)
	}
}

func TestReap(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	mustCreate(t, s,
		store.NewRollout{ID: "u", Task: task(1), Config: store.RolloutConfig{MaxAttempts: 2, UnresponsiveSeconds: 60}},
	)
	c1 := mustClaim(t, s)
	// Not yet stale.
	if res, err := s.Reap(bg, c1.Attempt.LastHeartbeat.Add(59*time.Second)); err != nil || res != (store.ReapResult{}) {
		t.Fatalf("early reap: %+v, %v", res, err)
	}
	res, err := s.Reap(bg, c1.Attempt.LastHeartbeat.Add(61*time.Second))
	if err != nil || res != (store.ReapResult{Unresponsive: 1, Requeued: 1}) {
		t.Fatalf("reap 1: %+v, %v", res, err)
	}
	if _, err := s.CompleteAttempt(bg, "u", c1.Attempt.ID, store.AttemptSucceeded, ""); !errors.Is(err, store.ErrConflict) ||
		!strings.Contains(err.Error(), "is unresponsive, not running") {
		t.Fatalf("complete reaped attempt: %v", err)
	}
	c2 := mustClaim(t, s)
	if c2.Rollout.ID != "u" || c2.Attempt.Number != 2 {
		t.Fatalf("reclaim: %+v", c2)
	}
	res, err = s.Reap(bg, c2.Attempt.LastHeartbeat.Add(61*time.Second))
	if err != nil || res != (store.ReapResult{Unresponsive: 1, Failed: 1}) {
		t.Fatalf("reap 2: %+v, %v", res, err)
	}
	r, err := s.GetRollout(bg, "u")
	if err != nil || r.Status != store.RolloutFailed || r.Error != "attempt 2 of 2 unresponsive: no heartbeat for 61.0s, limit 60s" || r.TerminalSeq == 0 {
		t.Fatalf("reaped rollout: %+v, %v", r, err)
	}
	if a := r.Attempts[0]; a.Status != store.AttemptUnresponsive || a.Error != "unresponsive: no heartbeat for 61.0s, limit 60s" || a.EndedAt == nil {
		t.Errorf("attempt 1: %+v", a)
	}

	// Timeout, with heartbeats keeping the attempt responsive.
	mustCreate(t, s, store.NewRollout{ID: "t", Task: task(2), Config: store.RolloutConfig{TimeoutSeconds: 30, UnresponsiveSeconds: 600}})
	c3 := mustClaim(t, s)
	res, err = s.Reap(bg, c3.Attempt.StartedAt.Add(31*time.Second))
	if err != nil || res != (store.ReapResult{TimedOut: 1, Failed: 1}) {
		t.Fatalf("reap timeout: %+v, %v", res, err)
	}
	r, _ = s.GetRollout(bg, "t")
	if r.Status != store.RolloutFailed || r.Error != "attempt 1 of 1 timeout: ran 31.0s, limit 30s" || r.Attempts[0].Status != store.AttemptTimeout {
		t.Fatalf("timed-out rollout: %+v", r)
	}

	// unresponsive_seconds 0 never reaps for silence... but WithDefaults
	// turns 0 into 60, so a heartbeat resets the clock instead.
	mustCreate(t, s, store.NewRollout{ID: "h", Task: task(3)})
	c4 := mustClaim(t, s)
	time.Sleep(5 * time.Millisecond)
	hb, err := s.Heartbeat(bg, "h", c4.Attempt.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.Reap(bg, c4.Attempt.LastHeartbeat.Add(60*time.Second+time.Millisecond)); err != nil || res != (store.ReapResult{}) || !hb.LastHeartbeat.After(c4.Attempt.LastHeartbeat) {
		t.Fatalf("reap after heartbeat: %+v, %v", res, err)
	}
}

func TestListRollouts(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	var nrs []store.NewRollout
	for i := 0; i < 25; i++ {
		mode := store.ModeTrain
		if i%5 == 0 {
			mode = store.ModeVal
		}
		nrs = append(nrs, store.NewRollout{ID: fmt.Sprintf("r%02d", i), GroupID: fmt.Sprintf("g%d", i%3), Task: task(i), Mode: mode})
	}
	mustCreate(t, s, nrs...)
	// Give three rollouts rewards 0, 0.5, 1.
	for i, v := range []string{"0", "0.5", "1"} {
		c, err := s.Claim(bg, store.ClaimRequest{Mode: store.ModeVal})
		if err != nil {
			t.Fatal(err)
		}
		if c.Rollout.ID != fmt.Sprintf("r%02d", i*5) {
			t.Fatalf("val claim %d got %s", i, c.Rollout.ID)
		}
		if _, err := s.AppendEvents(bg, c.Rollout.ID, c.Attempt.ID, []store.NewEvent{{Type: "reward", Data: json.RawMessage(v)}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CompleteAttempt(bg, c.Rollout.ID, c.Attempt.ID, store.AttemptSucceeded, ""); err != nil {
			t.Fatal(err)
		}
	}
	f := func(v float64) *float64 { return &v }
	ids := func(rs []store.Rollout) string {
		var b []string
		for _, r := range rs {
			b = append(b, r.ID)
		}
		return strings.Join(b, ",")
	}
	tests := []struct {
		name string
		f    store.RolloutFilter
		want string
		next bool
	}{
		{"page 1", store.RolloutFilter{Limit: 3}, "r00,r01,r02", true},
		{"desc", store.RolloutFilter{Limit: 2, Desc: true}, "r24,r23", true},
		{"group", store.RolloutFilter{GroupID: "g1", Limit: 4}, "r01,r04,r07,r10", true},
		{"mode val", store.RolloutFilter{Mode: store.ModeVal}, "r00,r05,r10,r15,r20", false},
		{"status", store.RolloutFilter{Status: []store.RolloutStatus{store.RolloutSucceeded}}, "r00,r05,r10", false},
		{"status two", store.RolloutFilter{Status: []store.RolloutStatus{store.RolloutSucceeded, store.RolloutRunning}, Desc: true}, "r10,r05,r00", false},
		{"min reward", store.RolloutFilter{MinReward: f(0.5)}, "r05,r10", false},
		{"reward range", store.RolloutFilter{MinReward: f(0.1), MaxReward: f(0.9)}, "r05", false},
		{"max reward", store.RolloutFilter{MaxReward: f(0)}, "r00", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs, next, err := s.ListRollouts(bg, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			if ids(rs) != tc.want || (next != 0) != tc.next {
				t.Fatalf("got %s next=%d, want %s next? %v", ids(rs), next, tc.want, tc.next)
			}
			if tc.next && next != rs[len(rs)-1].Seq {
				t.Errorf("next = %d, last seq %d", next, rs[len(rs)-1].Seq)
			}
		})
	}
	// Paging through everything in both directions visits each once.
	for _, desc := range []bool{false, true} {
		var all []store.Rollout
		cursor := int64(0)
		for {
			rs, next, err := s.ListRollouts(bg, store.RolloutFilter{Cursor: cursor, Limit: 7, Desc: desc})
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, rs...)
			if next == 0 {
				break
			}
			cursor = next
		}
		if len(all) != 25 {
			t.Fatalf("desc=%v: paged %d rollouts", desc, len(all))
		}
		for i := 1; i < len(all); i++ {
			if (all[i].Seq > all[i-1].Seq) == desc {
				t.Fatalf("desc=%v: out of order at %d", desc, i)
			}
		}
	}
	// Limit is capped.
	if rs, _, err := s.ListRollouts(bg, store.RolloutFilter{Limit: 5000}); err != nil || len(rs) != 25 {
		t.Errorf("big limit: %d, %v", len(rs), err)
	}
}

func TestModels(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	m1, err := s.RegisterModel(bg, store.Model{Name: "policy", Weights: "file:///w1", Endpoints: []string{"http://a", "http://b"}, Metadata: json.RawMessage(`{"step":1}`)})
	if err != nil || m1.Version != 1 || len(m1.Endpoints) != 2 || m1.CreatedAt.IsZero() {
		t.Fatalf("register 1: %+v, %v", m1, err)
	}
	m5, err := s.RegisterModel(bg, store.Model{Name: "policy", Version: 5})
	if err != nil || m5.Version != 5 {
		t.Fatalf("register 5: %+v, %v", m5, err)
	}
	if _, err := s.RegisterModel(bg, store.Model{Name: "policy", Version: 5}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("register 5 again: %v", err)
	}
	if _, err := s.RegisterModel(bg, store.Model{Name: "policy", Version: 3}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("register 3: %v", err)
	}
	m6, err := s.RegisterModel(bg, store.Model{Name: "policy"})
	if err != nil || m6.Version != 6 {
		t.Fatalf("register next: %+v, %v", m6, err)
	}
	if o, err := s.RegisterModel(bg, store.Model{Name: "other"}); err != nil || o.Version != 1 {
		t.Fatalf("other: %+v, %v", o, err)
	}
	for _, bad := range []store.Model{{}, {Name: "x", Version: -1}, {Name: "x", Metadata: json.RawMessage(`{`)}} {
		if _, err := s.RegisterModel(bg, bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("RegisterModel(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
	ms, err := s.ListModels(bg, "policy")
	if err != nil || len(ms) != 3 || ms[0].Version != 6 || ms[2].Version != 1 || string(ms[2].Metadata) != `{"step":1}` || ms[2].Weights != "file:///w1" {
		t.Fatalf("ListModels(policy) = %+v, %v", ms, err)
	}
	all, err := s.ListModels(bg, "")
	if err != nil || len(all) != 4 || all[0].Name != "other" {
		t.Fatalf("ListModels() = %+v, %v", all, err)
	}

	// Concurrent automatic registrations get distinct consecutive versions.
	var wg sync.WaitGroup
	vs := make(chan int64, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := s.RegisterModel(bg, store.Model{Name: "conc"})
			if err != nil {
				t.Error(err)
				return
			}
			vs <- m.Version
		}()
	}
	wg.Wait()
	close(vs)
	seen := map[int64]bool{}
	for v := range vs {
		seen[v] = true
	}
	for v := int64(1); v <= 20; v++ {
		if !seen[v] {
			t.Errorf("version %d missing: %v", v, seen)
		}
	}
}

// 16 concurrent claimers over 1,000 queued rollouts: each is claimed
// exactly once, none is lost.
func TestConcurrentClaims(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	const n = 1000
	nrs := make([]store.NewRollout, n)
	for i := range nrs {
		nrs[i] = store.NewRollout{ID: fmt.Sprintf("r%04d", i), Task: task(i)}
	}
	mustCreate(t, s, nrs...)
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		wg   sync.WaitGroup
	)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				c, err := s.Claim(bg, store.ClaimRequest{WorkerID: fmt.Sprint(w)})
				if errors.Is(err, store.ErrNoneQueued) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				seen[c.Rollout.ID]++
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("claimed %d distinct rollouts, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("%s claimed %d times", id, k)
		}
	}
	counts, err := s.CountRollouts(bg)
	if err != nil || counts[store.RolloutRunning] != n {
		t.Errorf("counts %v, %v", counts, err)
	}
}

// A reader following the terminal cursor while many writers finish
// rollouts concurrently sees every rollout exactly once: sequence numbers
// are handed out in commit order, so the cursor never skips one.
func TestTerminalCursorNeverSkips(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	const n, writers = 300, 8
	nrs := make([]store.NewRollout, n)
	for i := range nrs {
		nrs[i] = store.NewRollout{Task: task(i)}
	}
	mustCreate(t, s, nrs...)
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := s.Claim(ctx, store.ClaimRequest{})
				if errors.Is(err, store.ErrNoneQueued) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := s.AppendEvents(ctx, c.Rollout.ID, c.Attempt.ID, []store.NewEvent{{Type: "reward", Data: json.RawMessage("1")}}); err != nil {
					t.Error(err)
					return
				}
				if _, err := s.CompleteAttempt(ctx, c.Rollout.ID, c.Attempt.ID, store.AttemptSucceeded, ""); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	seen := map[string]bool{}
	var cursor int64
	follow := func() {
		rs, err := s.Terminal(bg, cursor, 50)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if seen[r.ID] {
				t.Fatalf("%s seen twice", r.ID)
			}
			if r.TerminalSeq <= cursor {
				t.Fatalf("terminal seq %d not after cursor %d", r.TerminalSeq, cursor)
			}
			seen[r.ID] = true
			cursor = r.TerminalSeq
		}
	}
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		follow()
	}
	follow()
	for i := 0; i < n/50+1; i++ {
		follow()
	}
	if len(seen) != n {
		t.Fatalf("cursor reader saw %d of %d terminal rollouts", len(seen), n)
	}
}

// Concurrent appends to one attempt are each atomic and contiguous in
// neither order nor interleaving requirements, but the listed order matches
// the sequence numbers each append returned.
func TestConcurrentAppends(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	mustCreate(t, s, store.NewRollout{ID: "r", Task: task(0)})
	c := mustClaim(t, s)
	var wg sync.WaitGroup
	const writers, batches, size = 6, 10, 20
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for b := 0; b < batches; b++ {
				evs := make([]store.NewEvent, size)
				for i := range evs {
					evs[i] = store.NewEvent{Type: "log", Data: json.RawMessage(fmt.Sprintf(`{"w":%d,"b":%d,"i":%d}`, w, b, i))}
				}
				out, err := s.AppendEvents(bg, "r", c.Attempt.ID, evs)
				if err != nil {
					t.Error(err)
					return
				}
				// Appends hold the rollout lock, so one batch is contiguous.
				if out[size-1].Seq-out[0].Seq != size-1 {
					t.Errorf("batch not contiguous: %d..%d", out[0].Seq, out[size-1].Seq)
				}
			}
		}(w)
	}
	wg.Wait()
	all, err := s.ListEvents(bg, store.EventFilter{RolloutID: "r"})
	if err != nil || len(all) != writers*batches*size {
		t.Fatalf("listed %d events, %v", len(all), err)
	}
	last := map[int]int{}
	for i, e := range all {
		if i > 0 && e.Seq <= all[i-1].Seq {
			t.Fatal("events out of order")
		}
		var d struct{ W, B, I int }
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		k := d.B*size + d.I
		if prev, ok := last[d.W]; ok && k != prev+1 {
			t.Fatalf("writer %d: event %d follows %d", d.W, k, prev)
		}
		last[d.W] = k
	}
}

func TestReopenAndClose(t *testing.T) {
	t.Parallel()
	url := testURL(t)
	s1, err := postgres.Open(bg, url)
	if err != nil {
		t.Fatal(err)
	}
	r := mustCreate(t, s1, store.NewRollout{ID: "keep", Task: task(1)})[0]
	// A second store on the same schema (another gateway replica) sees the
	// same data; migrating again is a no-op.
	s2, err := postgres.Open(bg, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	got, err := s2.GetRollout(bg, "keep")
	if err != nil || got.Seq != r.Seq {
		t.Fatalf("reopened: %+v, %v", got, err)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s1.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s1.GetRollout(bg, "keep"); !errors.Is(err, store.ErrStoreClosing) {
		t.Fatalf("after Close: %v", err)
	}
	if _, err := s1.Claim(bg, store.ClaimRequest{}); !errors.Is(err, store.ErrStoreClosing) {
		t.Fatalf("claim after Close: %v", err)
	}
	var v int
	if err := s2.Pool().QueryRow(bg, "SELECT version FROM schema_version").Scan(&v); err != nil || v != postgres.SchemaVersion {
		t.Fatalf("schema_version = %d, %v", v, err)
	}
}

func TestOpenBadURL(t *testing.T) {
	t.Parallel()
	if _, err := postgres.Open(bg, "postgres://nobody@127.0.0.1:1/x?connect_timeout=1"); err == nil {
		t.Fatal("Open on a closed port succeeded")
	}
	if _, err := postgres.Open(bg, "::not a url"); err == nil {
		t.Fatal("Open on garbage succeeded")
	}
}

// Workers that each create a rollout and then claim one never hear "none
// queued": at every moment there are at least as many queued rollouts as
// workers claiming, even though under MVCC a claim's snapshot may not see
// the newest ones while others hold the older ones' locks.
func TestClaimWhileCreating(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	const workers, each = 8, 40
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if _, err := s.CreateRollouts(bg, []store.NewRollout{{ID: fmt.Sprintf("w%d-%d", w, i)}}); err != nil {
					t.Error(err)
					return
				}
				c, err := s.Claim(bg, store.ClaimRequest{WorkerID: fmt.Sprint(w)})
				if err != nil {
					t.Errorf("worker %d claim %d: %v", w, i, err)
					return
				}
				if _, err := s.CompleteAttempt(bg, c.Rollout.ID, c.Attempt.ID, store.AttemptSucceeded, ""); err != nil {
					t.Error(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	counts, err := s.CountRollouts(bg)
	if err != nil || counts[store.RolloutSucceeded] != workers*each {
		t.Fatalf("counts %v, %v", counts, err)
	}
}

// TestMigrateToV2 opens a schema at version 1 (no step column, no
// train_steps): migrating adds them and fills step from metadata.
func TestMigrateToV2(t *testing.T) {
	t.Parallel()
	url := testURL(t)
	s1, err := postgres.Open(bg, url)
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s1, store.NewRollout{ID: "a", Metadata: json.RawMessage(`{"step":4}`)}, store.NewRollout{ID: "b"},
		store.NewRollout{ID: "c", Metadata: json.RawMessage(`{"x":1}`)})
	for _, q := range []string{`DROP TABLE train_steps`, `DROP INDEX attempts_started`, `ALTER TABLE rollouts DROP COLUMN step`, `UPDATE schema_version SET version = 1`} {
		if _, err := s1.Pool().Exec(bg, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s1.Close()
	s2, err := postgres.Open(bg, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	four := int64(4)
	rs, _, err := s2.ListRollouts(bg, store.RolloutFilter{Step: &four})
	if err != nil || len(rs) != 1 || rs[0].ID != "a" || rs[0].Step == nil || *rs[0].Step != 4 {
		t.Fatalf("step 4 after migration: %v %+v", err, rs)
	}
	if r, err := s2.GetRollout(bg, "c"); err != nil || r.Step != nil {
		t.Fatalf("rollout without step: %v %+v", err, r.Step)
	}
	if err := s2.PutTrainStep(bg, store.TrainStep{Run: "r", Mode: store.ModeTrain, Metrics: json.RawMessage(`{}`)}); err != nil {
		t.Fatalf("train steps after migration: %v", err)
	}
}

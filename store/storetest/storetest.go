// Package storetest is the conformance suite every store.Store backend must
// pass. A backend's test calls Run with a function that opens a fresh, empty
// store for each subtest.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aglrl/agl/store"
)

// Opener returns a fresh, empty store; it registers its own cleanup.
type Opener func(t *testing.T) store.Store

// Run runs the whole suite.
func Run(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"CreateIdempotent", testCreateIdempotent},
		{"CreateInvalid", testCreateInvalid},
		{"IDsAndText", testIDsAndText},
		{"ModelVersionExhausted", testModelVersionExhausted},
		{"ListFiltersAndPaging", testList},
		{"ClaimLifecycle", testClaimLifecycle},
		{"ClaimModeFilter", testClaimMode},
		{"ClaimNamedRollout", testClaimNamed},
		{"RetryThenFail", testRetryThenFail},
		{"IllegalTransitions", testIllegalTransitions},
		{"Events", testEvents},
		{"RewardSummary", testRewardSummary},
		{"Keys", testKeys},
		{"RevokeKey", testRevokeKey},
		{"Cancel", testCancel},
		{"TerminalCursor", testTerminal},
		{"Models", testModels},
		{"StepFilter", testStepFilter},
		{"TrainSteps", testTrainSteps},
		{"Workers", testWorkers},
		{"ReapUnresponsive", testReapUnresponsive},
		{"ReapTimeout", testReapTimeout},
		{"ConcurrentClaims", testConcurrentClaims},
		{"ConcurrentAppends", testConcurrentAppends},
		{"ConcurrentAppendsManyAttempts", testConcurrentAppendsManyAttempts},
		{"AppendsRacingCompletion", testAppendsRacingCompletion},
		{"BadAppendFailsAlone", testBadAppendFailsAlone},
		{"RecordedEvents", testRecordedEvents},
		{"StoredBytes", testStoredBytes},
		{"RecordsRacingCompletion", testRecordsRacingCompletion},
		{"LateWriter", testLateWriter},
		{"ModelCallsReadBack", testModelCallsReadBack},
		{"Prune", testPrune},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					f, ok := r.(failure)
					if !ok {
						panic(r)
					}
					t.Fatalf("unexpected error: %v", f.err)
				}
			}()
			tc.fn(t, open(t))
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// failure carries an unexpected error from must to the subtest's recover.
type failure struct{ err error }

// must returns v, or fails the running subtest (through Run's recover)
// when err is not nil. Use it only on the subtest's own goroutine.
func must[T any](v T, err error) T {
	if err != nil {
		panic(failure{err})
	}
	return v
}

func wantErr(t *testing.T, err, kind error) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("err = %v, want %v", err, kind)
	}
}

func create(t *testing.T, s store.Store, rs ...store.NewRollout) []store.Rollout {
	return must(s.CreateRollouts(ctx(t), rs))
}

func claim(t *testing.T, s store.Store) store.Claim {
	return must(s.Claim(ctx(t), store.ClaimRequest{WorkerID: "w1"}))
}

func testCreateIdempotent(t *testing.T, s store.Store) {
	c := ctx(t)
	rs := create(t, s, store.NewRollout{ID: "r1", GroupID: "g", Task: json.RawMessage(`{"b":1,"a":[1,2]}`), Metadata: json.RawMessage(`{"k":"v"}`),
		Config: store.RolloutConfig{MaxAttempts: 3, TimeoutSeconds: 10}})
	r := rs[0]
	if r.ID != "r1" || r.Status != store.RolloutQueuing || r.Mode != store.ModeTrain || r.GroupID != "g" {
		t.Fatalf("created %+v", r)
	}
	if string(r.Task) != `{"b":1,"a":[1,2]}` {
		t.Errorf("task = %s, want the bytes given", r.Task)
	}
	if r.Config.MaxAttempts != 3 || r.Config.TimeoutSeconds != 10 || r.Config.UnresponsiveSeconds != store.DefaultRolloutConfig.UnresponsiveSeconds {
		t.Errorf("config = %+v", r.Config)
	}
	if r.CreatedAt.IsZero() || r.Seq == 0 {
		t.Errorf("missing created time or seq: %+v", r)
	}
	// Same id again, different content: the stored one comes back.
	again := create(t, s, store.NewRollout{ID: "r1", Task: json.RawMessage(`"other"`)}, store.NewRollout{Task: json.RawMessage(`2`), Mode: store.ModeVal})
	if again[0].Seq != r.Seq || string(again[0].Task) != string(r.Task) {
		t.Errorf("repeat create returned %+v, want the stored rollout", again[0])
	}
	if again[1].ID == "" || again[1].ID == "r1" || again[1].Mode != store.ModeVal {
		t.Errorf("generated rollout %+v", again[1])
	}
	got := must(s.GetRollout(c, "r1"))
	if got.Seq != r.Seq || len(got.Attempts) != 0 {
		t.Errorf("get %+v", got)
	}
	_, err := s.GetRollout(c, "nope")
	wantErr(t, err, store.ErrNotFound)
}

func testCreateInvalid(t *testing.T, s store.Store) {
	c := ctx(t)
	cases := []store.NewRollout{
		{ID: "x", Mode: "bogus"},
		{ID: "y", Task: json.RawMessage(`{broken`)},
		{ID: "z", Config: store.RolloutConfig{MaxAttempts: -1}},
	}
	for _, n := range cases {
		_, err := s.CreateRollouts(c, []store.NewRollout{{ID: "ok"}, n})
		wantErr(t, err, store.ErrInvalid)
	}
	// A batch with a bad member creates nothing.
	_, err := s.GetRollout(c, "ok")
	wantErr(t, err, store.ErrNotFound)
}

// testIDsAndText: ids outside the id alphabet and text that is not valid
// UTF-8 are refused with ErrInvalid naming the field, on every write;
// ids of the whole alphabet (and those the trainer and Agent Lightning
// generate) are accepted and round-trip.
func testIDsAndText(t *testing.T, s store.Store) {
	c := ctx(t)
	bad := "\xff\xfe"
	refused := []struct {
		name, mention string
		write         func() error
	}{
		{"slash in id", "rollout id", func() error { _, err := s.CreateRollouts(c, []store.NewRollout{{ID: "a/b"}}); return err }},
		{"space in id", "rollout id", func() error { _, err := s.CreateRollouts(c, []store.NewRollout{{ID: "a b"}}); return err }},
		{"percent in id", "rollout id", func() error { _, err := s.CreateRollouts(c, []store.NewRollout{{ID: "a%2Fb"}}); return err }},
		{"query in id", "rollout id", func() error { _, err := s.CreateRollouts(c, []store.NewRollout{{ID: "a?b"}}); return err }},
		{"dot-dot id", "rollout id", func() error { _, err := s.CreateRollouts(c, []store.NewRollout{{ID: ".."}}); return err }},
		{"non-ASCII id", "rollout id", func() error { _, err := s.CreateRollouts(c, []store.NewRollout{{ID: "rollé"}}); return err }},
		{"long id", "rollout id", func() error {
			_, err := s.CreateRollouts(c, []store.NewRollout{{ID: strings.Repeat("x", store.MaxIDLen+1)}})
			return err
		}},
		{"slash in group", "group_id", func() error { _, err := s.CreateRollouts(c, []store.NewRollout{{ID: "g", GroupID: "x/y"}}); return err }},
		{"task not UTF-8", "task", func() error {
			_, err := s.CreateRollouts(c, []store.NewRollout{{ID: "t", Task: json.RawMessage(`"` + bad + `"`)}})
			return err
		}},
		{"metadata not UTF-8", "metadata", func() error {
			_, err := s.CreateRollouts(c, []store.NewRollout{{ID: "m", Metadata: json.RawMessage(`{"k":"` + bad + `"}`)}})
			return err
		}},
		{"model metadata not UTF-8", "metadata", func() error {
			_, err := s.RegisterModel(c, store.Model{Name: "m", Metadata: json.RawMessage(`{"k":"` + bad + `"}`)})
			return err
		}},
		{"train metrics not UTF-8", "UTF-8", func() error {
			return s.PutTrainStep(c, store.TrainStep{Run: "r", Mode: store.ModeTrain, Metrics: json.RawMessage(`{"k":"` + bad + `"}`)})
		}},
	}
	for _, tc := range refused {
		err := tc.write()
		if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%s: err = %v, want ErrInvalid naming %q", tc.name, err, tc.mention)
		}
	}
	if rs, _ := must2(s.ListRollouts(c, store.RolloutFilter{})); len(rs) != 0 {
		t.Fatalf("refused writes created %v", ids(rs))
	}
	accepted := []string{"ro-6f1c2d", "ro_3f2a", "agl-s12-t3-r7~1", "agl-val-v2-t0", "A.z_0~9:-x", "...", store.IDSafe("Qwen/Qwen3 0.6B") + "-s1-t0-r0", strings.Repeat("y", store.MaxIDLen)}
	for _, id := range accepted {
		if r := create(t, s, store.NewRollout{ID: id, GroupID: id}); r[0].ID != id || r[0].GroupID != id {
			t.Errorf("id %q came back as %q (group %q)", id, r[0].ID, r[0].GroupID)
		}
	}
	cl := claim(t, s)
	for _, tc := range []struct {
		name string
		ev   store.NewEvent
	}{
		{"type", store.NewEvent{Type: "log" + bad}},
		{"data", store.NewEvent{Type: "log", Data: json.RawMessage(`"` + bad + `"`)}},
	} {
		_, err := s.AppendEvents(c, cl.Rollout.ID, cl.Attempt.ID, []store.NewEvent{tc.ev})
		if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), tc.name) || !strings.Contains(err.Error(), "UTF-8") {
			t.Errorf("event %s not UTF-8: err = %v", tc.name, err)
		}
	}
	if evs := must(s.ListEvents(c, store.EventFilter{RolloutID: cl.Rollout.ID})); len(evs) != 0 {
		t.Errorf("refused events stored: %+v", evs)
	}
}

// testModelVersionExhausted: after version MaxInt64 a registration
// without a version is refused, never given a wrapped negative version.
func testModelVersionExhausted(t *testing.T, s store.Store) {
	c := ctx(t)
	must(s.RegisterModel(c, store.Model{Name: "m", Version: math.MaxInt64}))
	_, err := s.RegisterModel(c, store.Model{Name: "m"})
	if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "version") {
		t.Fatalf("next version after MaxInt64: %v, want ErrInvalid", err)
	}
	if ms := must(s.ListModels(c, "m")); len(ms) != 1 || ms[0].Version != math.MaxInt64 {
		t.Errorf("models %+v", ms)
	}
}

func testList(t *testing.T, s store.Store) {
	c := ctx(t)
	var in []store.NewRollout
	for i := 0; i < 25; i++ {
		mode := store.ModeTrain
		if i%5 == 0 {
			mode = store.ModeVal
		}
		in = append(in, store.NewRollout{ID: fmt.Sprintf("r%02d", i), GroupID: fmt.Sprintf("g%d", i%3), Mode: mode})
	}
	create(t, s, in...)
	claim(t, s) // r00 running
	// Page through everything, ascending.
	var seen []string
	var cursor int64
	for {
		page, next := must2(s.ListRollouts(c, store.RolloutFilter{Cursor: cursor, Limit: 10}))
		for _, r := range page {
			seen = append(seen, r.ID)
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	if len(seen) != 25 || seen[0] != "r00" || seen[24] != "r24" {
		t.Fatalf("paged ids %v", seen)
	}
	desc, _ := must2(s.ListRollouts(c, store.RolloutFilter{Desc: true, Limit: 3}))
	if len(desc) != 3 || desc[0].ID != "r24" {
		t.Errorf("desc page %v", ids(desc))
	}
	desc2, _ := must2(s.ListRollouts(c, store.RolloutFilter{Desc: true, Limit: 3, Cursor: desc[2].Seq}))
	if len(desc2) != 3 || desc2[0].ID != "r21" {
		t.Errorf("desc page 2 %v", ids(desc2))
	}
	g1, _ := must2(s.ListRollouts(c, store.RolloutFilter{GroupID: "g1"}))
	for _, r := range g1 {
		if r.GroupID != "g1" {
			t.Errorf("group filter returned %s", r.GroupID)
		}
	}
	if len(g1) != 8 {
		t.Errorf("group g1 has %d, want 8", len(g1))
	}
	val, _ := must2(s.ListRollouts(c, store.RolloutFilter{Mode: store.ModeVal}))
	if len(val) != 5 {
		t.Errorf("val rollouts %d, want 5", len(val))
	}
	running, _ := must2(s.ListRollouts(c, store.RolloutFilter{Status: []store.RolloutStatus{store.RolloutRunning}}))
	if len(running) != 1 || running[0].ID != "r00" {
		t.Errorf("running %v", ids(running))
	}
	counts := must(s.CountRollouts(c))
	if counts[store.RolloutQueuing] != 24 || counts[store.RolloutRunning] != 1 {
		t.Errorf("counts %v", counts)
	}
}

func must2(rs []store.Rollout, n int64, err error) ([]store.Rollout, int64) {
	if err != nil {
		panic(failure{err})
	}
	return rs, n
}

func ids(rs []store.Rollout) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

func testClaimLifecycle(t *testing.T, s store.Store) {
	c := ctx(t)
	_, err := s.Claim(c, store.ClaimRequest{WorkerID: "w"})
	wantErr(t, err, store.ErrNoneQueued)
	create(t, s, store.NewRollout{ID: "a"}, store.NewRollout{ID: "b"})
	cl := claim(t, s)
	if cl.Rollout.ID != "a" || cl.Rollout.Status != store.RolloutRunning || cl.Attempt.Number != 1 ||
		cl.Attempt.Status != store.AttemptRunning || cl.Attempt.WorkerID != "w1" || cl.Key == "" {
		t.Fatalf("claim %+v", cl)
	}
	hb := must(s.Heartbeat(c, "a", cl.Attempt.ID))
	if hb.LastHeartbeat.Before(cl.Attempt.LastHeartbeat) {
		t.Errorf("heartbeat went back in time")
	}
	r := must(s.CompleteAttempt(c, "a", cl.Attempt.ID, store.AttemptSucceeded, ""))
	if r.Status != store.RolloutSucceeded || r.TerminalSeq == 0 {
		t.Errorf("completed rollout %+v", r)
	}
	got := must(s.GetRollout(c, "a"))
	if len(got.Attempts) != 1 || got.Attempts[0].Status != store.AttemptSucceeded || got.Attempts[0].EndedAt == nil {
		t.Errorf("attempts %+v", got.Attempts)
	}
	if cl2 := claim(t, s); cl2.Rollout.ID != "b" {
		t.Errorf("second claim got %s", cl2.Rollout.ID)
	}
}

func testClaimMode(t *testing.T, s store.Store) {
	c := ctx(t)
	create(t, s, store.NewRollout{ID: "t", Mode: store.ModeTrain}, store.NewRollout{ID: "v", Mode: store.ModeVal})
	cl := must(s.Claim(c, store.ClaimRequest{WorkerID: "w", Mode: store.ModeVal}))
	if cl.Rollout.ID != "v" {
		t.Errorf("val claim got %s", cl.Rollout.ID)
	}
	_, err := s.Claim(c, store.ClaimRequest{WorkerID: "w", Mode: "nope"})
	wantErr(t, err, store.ErrInvalid)
}

// testClaimNamed: a claim naming a rollout takes that one, later in the
// queue than others, and none once it runs (an external controller and
// agl's own never both start it).
func testClaimNamed(t *testing.T, s store.Store) {
	c := ctx(t)
	create(t, s, store.NewRollout{ID: "a"}, store.NewRollout{ID: "b", Mode: store.ModeVal})
	cl := must(s.Claim(c, store.ClaimRequest{WorkerID: "ext", RolloutID: "b", Mode: store.ModeVal}))
	if cl.Rollout.ID != "b" || cl.Attempt.WorkerID != "ext" || cl.Rollout.Status != store.RolloutRunning {
		t.Fatalf("named claim %+v", cl)
	}
	if _, err := s.Claim(c, store.ClaimRequest{WorkerID: "ext", RolloutID: "b"}); !errors.Is(err, store.ErrNoneQueued) {
		t.Errorf("second named claim of a running rollout: %v", err)
	}
	if _, err := s.Claim(c, store.ClaimRequest{WorkerID: "ext", RolloutID: "a", Mode: store.ModeVal}); !errors.Is(err, store.ErrNoneQueued) {
		t.Errorf("named claim of a train rollout in val mode: %v", err)
	}
	if _, err := s.Claim(c, store.ClaimRequest{WorkerID: "ext", RolloutID: "nope"}); !errors.Is(err, store.ErrNoneQueued) {
		t.Errorf("named claim of an unknown rollout: %v", err)
	}
	if cl := claim(t, s); cl.Rollout.ID != "a" {
		t.Errorf("plain claim got %s", cl.Rollout.ID)
	}
}

func testRetryThenFail(t *testing.T, s store.Store) {
	c := ctx(t)
	create(t, s, store.NewRollout{ID: "r", Config: store.RolloutConfig{MaxAttempts: 2}})
	a1 := claim(t, s)
	r := must(s.CompleteAttempt(c, "r", a1.Attempt.ID, store.AttemptFailed, "exit status 3"))
	if r.Status != store.RolloutRequeuing || r.TerminalSeq != 0 {
		t.Fatalf("after first failure %+v", r)
	}
	a2 := claim(t, s)
	if a2.Rollout.ID != "r" || a2.Attempt.Number != 2 || a2.Attempt.ID == a1.Attempt.ID || a2.Key == a1.Key {
		t.Fatalf("second claim %+v", a2)
	}
	r = must(s.CompleteAttempt(c, "r", a2.Attempt.ID, store.AttemptFailed, "exit status 4"))
	if r.Status != store.RolloutFailed || r.Error == "" || r.NumAttempts != 2 {
		t.Fatalf("after second failure %+v", r)
	}
	if _, err := s.Claim(c, store.ClaimRequest{}); !errors.Is(err, store.ErrNoneQueued) {
		t.Errorf("failed rollout claimable: %v", err)
	}
}

func testIllegalTransitions(t *testing.T, s store.Store) {
	c := ctx(t)
	create(t, s, store.NewRollout{ID: "r"})
	cl := claim(t, s)
	_, err := s.CompleteAttempt(c, "r", cl.Attempt.ID, store.AttemptTimeout, "")
	wantErr(t, err, store.ErrInvalid)
	_, err = s.CompleteAttempt(c, "r", "nope", store.AttemptSucceeded, "")
	wantErr(t, err, store.ErrNotFound)
	_, err = s.CompleteAttempt(c, "other", cl.Attempt.ID, store.AttemptSucceeded, "")
	wantErr(t, err, store.ErrNotFound)
	must(s.CompleteAttempt(c, "r", cl.Attempt.ID, store.AttemptSucceeded, ""))
	_, err = s.CompleteAttempt(c, "r", cl.Attempt.ID, store.AttemptFailed, "")
	wantErr(t, err, store.ErrConflict)
	_, err = s.Heartbeat(c, "r", cl.Attempt.ID)
	wantErr(t, err, store.ErrConflict)
	_, err = s.AppendEvents(c, "r", cl.Attempt.ID, []store.NewEvent{{Type: "log"}})
	wantErr(t, err, store.ErrConflict)
	_, err = s.CancelRollout(c, "r", "")
	wantErr(t, err, store.ErrConflict)
}

func testEvents(t *testing.T, s store.Store) {
	c := ctx(t)
	create(t, s, store.NewRollout{ID: "r"}, store.NewRollout{ID: "q"})
	cl := claim(t, s)
	evs := must(s.AppendEvents(c, "r", cl.Attempt.ID, []store.NewEvent{
		{Type: store.EventModelRequest, Data: json.RawMessage(`{"z":1,"a":2}`)},
		{Type: store.EventLog, Data: json.RawMessage(`"hello"`)},
		{Type: "custom.thing"},
	}))
	if len(evs) != 3 || evs[0].Seq >= evs[1].Seq || evs[1].Seq >= evs[2].Seq {
		t.Fatalf("appended %+v", evs)
	}
	all := must(s.ListEvents(c, store.EventFilter{RolloutID: "r"}))
	if len(all) != 3 || string(all[0].Data) != `{"z":1,"a":2}` || all[2].Type != "custom.thing" || string(all[2].Data) != "null" {
		t.Fatalf("listed %+v", all)
	}
	if all[0].AttemptID != cl.Attempt.ID || all[0].Time.IsZero() {
		t.Errorf("event fields %+v", all[0])
	}
	logs := must(s.ListEvents(c, store.EventFilter{RolloutID: "r", Types: []string{store.EventLog}}))
	if len(logs) != 1 || logs[0].Type != store.EventLog {
		t.Errorf("type filter %+v", logs)
	}
	after := must(s.ListEvents(c, store.EventFilter{RolloutID: "r", AfterSeq: evs[0].Seq, Limit: 1}))
	if len(after) != 1 || after[0].Seq != evs[1].Seq {
		t.Errorf("after/limit %+v", after)
	}
	none := must(s.ListEvents(c, store.EventFilter{RolloutID: "q"}))
	if len(none) != 0 {
		t.Errorf("other rollout has events %+v", none)
	}
	_, err := s.ListEvents(c, store.EventFilter{RolloutID: "missing"})
	wantErr(t, err, store.ErrNotFound)
	_, err = s.AppendEvents(c, "r", cl.Attempt.ID, []store.NewEvent{{Type: "ok"}, {Type: ""}})
	wantErr(t, err, store.ErrInvalid)
	_, err = s.AppendEvents(c, "r", cl.Attempt.ID, []store.NewEvent{{Type: "x", Data: json.RawMessage(`{nope`)}})
	wantErr(t, err, store.ErrInvalid)
	_, err = s.AppendEvents(c, "q", cl.Attempt.ID, []store.NewEvent{{Type: "x"}})
	wantErr(t, err, store.ErrNotFound)
	if n := len(must(s.ListEvents(c, store.EventFilter{RolloutID: "r"}))); n != 3 {
		t.Errorf("a refused batch stored something: %d events", n)
	}
}

// testStoredBytes: StoredEventBytes counts the stored bytes of one
// attempt's events of one type, recorded ones included before they are
// applied, and nothing else.
func testStoredBytes(t *testing.T, s store.Store) {
	sb, ok := s.(store.StoredBytes)
	if !ok {
		t.Skip("the store does not tell its stored bytes")
	}
	c := ctx(t)
	create(t, s, store.NewRollout{ID: "r"}, store.NewRollout{ID: "q"})
	a, b := claim(t, s), claim(t, s)
	stored := func(cl store.Claim) int64 {
		t.Helper()
		return must(sb.StoredEventBytes(c, cl.Rollout.ID, cl.Attempt.ID, store.EventModelRequest))
	}
	if n := stored(a); n != 0 {
		t.Fatalf("%d bytes stored before any event", n)
	}
	call := func(i int) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"call":%d,"text":%q}`, i, strings.Repeat("some words of a long call ", 80)))
	}
	must(s.AppendEvents(c, a.Rollout.ID, a.Attempt.ID, []store.NewEvent{{Type: store.EventModelRequest, Data: call(1)}}))
	one := stored(a)
	if one <= 0 {
		t.Fatalf("%d bytes stored after a call of %d", one, len(call(1)))
	}
	must(s.AppendEvents(c, a.Rollout.ID, a.Attempt.ID, []store.NewEvent{{Type: store.EventLog, Data: call(2)}}))
	must(s.AppendEvents(c, b.Rollout.ID, b.Attempt.ID, []store.NewEvent{{Type: store.EventModelRequest, Data: call(3)}}))
	if n := stored(a); n != one {
		t.Errorf("%d bytes after a log event and another attempt's call, want %d", n, one)
	}
	if n := stored(b); n <= 0 {
		t.Errorf("the other attempt: %d bytes", n)
	}
	if r, ok := s.(store.EventRecorder); ok {
		if err := r.RecordEvents(c, a.Rollout.ID, a.Attempt.ID, []store.NewEvent{{Type: store.EventModelRequest, Data: call(4)}}); err != nil {
			t.Fatal(err)
		}
	} else {
		must(s.AppendEvents(c, a.Rollout.ID, a.Attempt.ID, []store.NewEvent{{Type: store.EventModelRequest, Data: call(4)}}))
	}
	if n := stored(a); n <= one {
		t.Errorf("%d bytes after a second call, want more than %d", n, one)
	}
}

func testRewardSummary(t *testing.T, s store.Store) {
	c := ctx(t)
	create(t, s, store.NewRollout{ID: "r"}, store.NewRollout{ID: "none"})
	cl := claim(t, s)
	must(s.AppendEvents(c, "r", cl.Attempt.ID, []store.NewEvent{
		{Type: store.EventReward, Data: json.RawMessage(`{"value":0.25}`)},
		{Type: store.EventReward, Data: json.RawMessage(`{"values":{"correct":1,"format":0.5},"primary":"correct"}`)},
		{Type: store.EventReward, Data: json.RawMessage(`{"value":-3,"call_id":"c1"}`)},
	}))
	r := must(s.CompleteAttempt(c, "r", cl.Attempt.ID, store.AttemptSucceeded, ""))
	if r.Reward == nil || *r.Reward != 1 || len(r.RewardData) == 0 {
		t.Errorf("reward summary %v %s, want 1 (last final reward, primary dimension)", r.Reward, r.RewardData)
	}
	cl2 := claim(t, s)
	r2 := must(s.CompleteAttempt(c, "none", cl2.Attempt.ID, store.AttemptSucceeded, ""))
	if r2.Reward != nil {
		t.Errorf("reward without events: %v", *r2.Reward)
	}
	lo, hi := 0.5, 2.0
	got, _ := must2(s.ListRollouts(c, store.RolloutFilter{MinReward: &lo, MaxReward: &hi}))
	if len(got) != 1 || got[0].ID != "r" {
		t.Errorf("reward range filter %v", ids(got))
	}
}

func testKeys(t *testing.T, s store.Store) {
	c := ctx(t)
	create(t, s, store.NewRollout{ID: "a"}, store.NewRollout{ID: "b"})
	ca, cb := claim(t, s), claim(t, s)
	a := must(s.AttemptByKey(c, "a", ca.Attempt.ID, ca.Key))
	if a.ID != ca.Attempt.ID || a.Status != store.AttemptRunning {
		t.Errorf("attempt by key %+v", a)
	}
	for _, k := range []struct{ r, a, key string }{
		{"a", ca.Attempt.ID, cb.Key},
		{"b", cb.Attempt.ID, ca.Key},
		{"a", cb.Attempt.ID, cb.Key},
		{"a", ca.Attempt.ID, ""},
		{"a", ca.Attempt.ID, ca.Key + "x"},
		{"zz", "yy", ca.Key},
	} {
		_, err := s.AttemptByKey(c, k.r, k.a, k.key)
		wantErr(t, err, store.ErrForbidden)
	}
}

// testRevokeKey: a revoked key grants nothing, the attempt runs on (the
// admin still completes it), other attempts' keys are untouched.
func testRevokeKey(t *testing.T, s store.Store) {
	c := ctx(t)
	create(t, s, store.NewRollout{ID: "a"}, store.NewRollout{ID: "b"})
	ca, cb := claim(t, s), claim(t, s)
	if err := s.RevokeKey(c, "a", ca.Attempt.ID); err != nil {
		t.Fatal(err)
	}
	_, err := s.AttemptByKey(c, "a", ca.Attempt.ID, ca.Key)
	wantErr(t, err, store.ErrForbidden)
	must(s.AttemptByKey(c, "b", cb.Attempt.ID, cb.Key))
	if err := s.RevokeKey(c, "a", ca.Attempt.ID); err != nil {
		t.Errorf("second revoke: %v", err)
	}
	wantErr(t, s.RevokeKey(c, "a", cb.Attempt.ID), store.ErrNotFound)
	wantErr(t, s.RevokeKey(c, "zz", "yy"), store.ErrNotFound)
	must(s.AppendEvents(c, "a", ca.Attempt.ID, []store.NewEvent{{Type: store.EventReward, Data: json.RawMessage(`{"value":0,"source":"evaluator"}`)}}))
	r := must(s.CompleteAttempt(c, "a", ca.Attempt.ID, store.AttemptSucceeded, ""))
	if r.Status != store.RolloutSucceeded || r.Reward == nil || *r.Reward != 0 {
		t.Errorf("after revoke: rollout %s reward %v", r.Status, r.Reward)
	}
}

func testCancel(t *testing.T, s store.Store) {
	c := ctx(t)
	create(t, s, store.NewRollout{ID: "q"}, store.NewRollout{ID: "run"})
	must(s.CancelRollout(c, "q", "not needed"))
	cl := claim(t, s)
	if cl.Rollout.ID != "run" {
		t.Fatalf("cancelled rollout was claimed")
	}
	r := must(s.CancelRollout(c, "run", "user"))
	if r.Status != store.RolloutCancelled || r.TerminalSeq == 0 || r.Error == "" {
		t.Errorf("cancelled %+v", r)
	}
	_, err := s.Heartbeat(c, "run", cl.Attempt.ID)
	wantErr(t, err, store.ErrConflict)
	_, err = s.CompleteAttempt(c, "run", cl.Attempt.ID, store.AttemptSucceeded, "")
	wantErr(t, err, store.ErrConflict)
	_, err = s.CancelRollout(c, "missing", "")
	wantErr(t, err, store.ErrNotFound)
}

func testTerminal(t *testing.T, s store.Store) {
	c := ctx(t)
	create(t, s, store.NewRollout{ID: "a"}, store.NewRollout{ID: "b"}, store.NewRollout{ID: "c"})
	ca, cb := claim(t, s), claim(t, s)
	if rs := must(s.Terminal(c, 0, 10)); len(rs) != 0 {
		t.Fatalf("terminal before any ended: %v", ids(rs))
	}
	must(s.CompleteAttempt(c, "b", cb.Attempt.ID, store.AttemptSucceeded, ""))
	must(s.CancelRollout(c, "c", ""))
	must(s.CompleteAttempt(c, "a", ca.Attempt.ID, store.AttemptFailed, "boom"))
	rs := must(s.Terminal(c, 0, 10))
	if got := fmt.Sprint(ids(rs)); got != "[b c a]" {
		t.Fatalf("terminal order %s, want [b c a]", got)
	}
	rest := must(s.Terminal(c, rs[0].TerminalSeq, 10))
	if got := fmt.Sprint(ids(rest)); got != "[c a]" {
		t.Errorf("after cursor %s", got)
	}
	if one := must(s.Terminal(c, 0, 1)); len(one) != 1 {
		t.Errorf("limit ignored: %d", len(one))
	}
}

func testModels(t *testing.T, s store.Store) {
	c := ctx(t)
	m1 := must(s.RegisterModel(c, store.Model{Name: "m", Weights: "/w/1", Endpoints: []string{"http://a"}}))
	m2 := must(s.RegisterModel(c, store.Model{Name: "m", Weights: "/w/2"}))
	if m1.Version != 1 || m2.Version != 2 || m1.CreatedAt.IsZero() {
		t.Fatalf("versions %d %d", m1.Version, m2.Version)
	}
	m5 := must(s.RegisterModel(c, store.Model{Name: "m", Version: 5}))
	if m5.Version != 5 {
		t.Errorf("explicit version %d", m5.Version)
	}
	_, err := s.RegisterModel(c, store.Model{Name: "m", Version: 4})
	wantErr(t, err, store.ErrConflict)
	_, err = s.RegisterModel(c, store.Model{})
	wantErr(t, err, store.ErrInvalid)
	must(s.RegisterModel(c, store.Model{Name: "other"}))
	ms := must(s.ListModels(c, "m"))
	if len(ms) != 3 || ms[0].Version != 5 || ms[2].Version != 1 || ms[2].Endpoints[0] != "http://a" || ms[2].Weights != "/w/1" {
		t.Errorf("list %+v", ms)
	}
	if all := must(s.ListModels(c, "")); len(all) != 4 {
		t.Errorf("all models %d", len(all))
	}
}

func testReapUnresponsive(t *testing.T, s store.Store) {
	c := ctx(t)
	create(t, s, store.NewRollout{ID: "r", Config: store.RolloutConfig{MaxAttempts: 2, UnresponsiveSeconds: 5}})
	a1 := claim(t, s)
	if res := must(s.Reap(c, time.Now().Add(2*time.Second))); res != (store.ReapResult{}) {
		t.Fatalf("reaped a live attempt: %+v", res)
	}
	res := must(s.Reap(c, time.Now().Add(10*time.Second)))
	if res.Unresponsive != 1 || res.Requeued != 1 {
		t.Fatalf("first reap %+v", res)
	}
	r := must(s.GetRollout(c, "r"))
	if r.Status != store.RolloutRequeuing || r.Attempts[0].Status != store.AttemptUnresponsive || r.Attempts[0].Error == "" {
		t.Fatalf("after reap %+v", r)
	}
	_, err := s.CompleteAttempt(c, "r", a1.Attempt.ID, store.AttemptSucceeded, "")
	wantErr(t, err, store.ErrConflict)
	a2 := claim(t, s)
	if a2.Attempt.Number != 2 {
		t.Fatalf("requeued claim %+v", a2.Attempt)
	}
	res = must(s.Reap(c, time.Now().Add(10*time.Second)))
	if res.Unresponsive != 1 || res.Failed != 1 {
		t.Fatalf("second reap %+v", res)
	}
	r = must(s.GetRollout(c, "r"))
	if r.Status != store.RolloutFailed || r.Error == "" || r.TerminalSeq == 0 {
		t.Fatalf("rollout after max attempts %+v", r)
	}
}

func testReapTimeout(t *testing.T, s store.Store) {
	c := ctx(t)
	create(t, s, store.NewRollout{ID: "r", Config: store.RolloutConfig{TimeoutSeconds: 30, UnresponsiveSeconds: 1000}})
	cl := claim(t, s)
	must(s.Heartbeat(c, "r", cl.Attempt.ID))
	res := must(s.Reap(c, time.Now().Add(time.Minute)))
	if res.TimedOut != 1 || res.Failed != 1 {
		t.Fatalf("reap %+v", res)
	}
	r := must(s.GetRollout(c, "r"))
	if r.Status != store.RolloutFailed || r.Attempts[0].Status != store.AttemptTimeout {
		t.Fatalf("after timeout %+v", r)
	}
}

func testConcurrentClaims(t *testing.T, s store.Store) {
	c := ctx(t)
	const n, workers = 1000, 16
	in := make([]store.NewRollout, n)
	for i := range in {
		in[i] = store.NewRollout{ID: fmt.Sprintf("r%04d", i)}
	}
	for i := 0; i < n; i += 250 {
		create(t, s, in[i:i+250]...)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				cl, err := s.Claim(c, store.ClaimRequest{WorkerID: fmt.Sprint("w", w)})
				if errors.Is(err, store.ErrNoneQueued) {
					return
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				seen[cl.Rollout.ID]++
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != n {
		t.Fatalf("claimed %d distinct rollouts, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("%s claimed %d times", id, k)
		}
	}
}

func testConcurrentAppends(t *testing.T, s store.Store) {
	c := ctx(t)
	create(t, s, store.NewRollout{ID: "r"})
	cl := claim(t, s)
	const writers, batches = 8, 20
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for b := 0; b < batches; b++ {
				evs := make([]store.NewEvent, 5)
				for i := range evs {
					evs[i] = store.NewEvent{Type: "log", Data: json.RawMessage(fmt.Sprintf(`{"w":%d,"b":%d,"i":%d}`, w, b, i))}
				}
				if _, err := s.AppendEvents(c, "r", cl.Attempt.ID, evs); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	all := must(s.ListEvents(c, store.EventFilter{RolloutID: "r"}))
	if len(all) != writers*batches*5 {
		t.Fatalf("%d events, want %d", len(all), writers*batches*5)
	}
	// Each batch is contiguous and in order.
	for i := 0; i < len(all); i += 5 {
		var first struct{ W, B, I int }
		json.Unmarshal(all[i].Data, &first)
		for j := 1; j < 5; j++ {
			var e struct{ W, B, I int }
			json.Unmarshal(all[i+j].Data, &e)
			if e.W != first.W || e.B != first.B || e.I != j {
				t.Fatalf("batch interleaved at %d: %s after %s", i+j, all[i+j].Data, all[i].Data)
			}
		}
	}
}

func step(n int64) *int64 { return &n }

func testStepFilter(t *testing.T, s store.Store) {
	c := ctx(t)
	var in []store.NewRollout
	for i := 0; i < 12; i++ {
		in = append(in, store.NewRollout{ID: fmt.Sprintf("s%02d", i), Metadata: json.RawMessage(fmt.Sprintf(`{"step":%d,"k":"v"}`, i%3))})
	}
	in = append(in,
		store.NewRollout{ID: "explicit", Step: step(1), Metadata: json.RawMessage(`{"step":7}`)},
		store.NewRollout{ID: "nostep", Metadata: json.RawMessage(`{"k":1}`)},
		store.NewRollout{ID: "badstep", Metadata: json.RawMessage(`{"step":"x"}`)},
		store.NewRollout{ID: "fracstep", Metadata: json.RawMessage(`{"step":1.5}`)},
		store.NewRollout{ID: "array", Metadata: json.RawMessage(`[1]`)},
	)
	created := create(t, s, in...)
	if created[0].Step == nil || *created[0].Step != 0 || created[12].Step == nil || *created[12].Step != 1 {
		t.Fatalf("created steps %v %v, want 0 (from metadata) and 1 (explicit)", created[0].Step, created[12].Step)
	}
	for _, r := range created[13:] {
		if r.Step != nil {
			t.Errorf("rollout %s: step %d, want none", r.ID, *r.Step)
		}
	}
	if got := must(s.GetRollout(c, "s04")); got.Step == nil || *got.Step != 1 {
		t.Errorf("GetRollout step %v, want 1", got.Step)
	}
	// Step 1: s01 s04 s07 s10 and explicit; paged by 2, newest first.
	var seen []string
	var cursor int64
	for {
		page, next := must2(s.ListRollouts(c, store.RolloutFilter{Step: step(1), Desc: true, Limit: 2, Cursor: cursor}))
		for _, r := range page {
			if r.Step == nil || *r.Step != 1 {
				t.Errorf("step filter returned %s with step %v", r.ID, r.Step)
			}
			seen = append(seen, r.ID)
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	if fmt.Sprint(seen) != "[explicit s10 s07 s04 s01]" {
		t.Errorf("step 1 pages %v", seen)
	}
	// Combined with other filters.
	cl := claim(t, s) // s00, step 0
	must(s.CompleteAttempt(c, cl.Rollout.ID, cl.Attempt.ID, store.AttemptSucceeded, ""))
	done, _ := must2(s.ListRollouts(c, store.RolloutFilter{Step: step(0), Status: []store.RolloutStatus{store.RolloutSucceeded}}))
	if len(done) != 1 || done[0].ID != "s00" {
		t.Errorf("step 0 succeeded %v", ids(done))
	}
	none, _ := must2(s.ListRollouts(c, store.RolloutFilter{Step: step(99)}))
	if len(none) != 0 {
		t.Errorf("step 99 %v", ids(none))
	}
	_, err := s.CreateRollouts(c, []store.NewRollout{{ID: "neg", Step: step(-1)}})
	wantErr(t, err, store.ErrInvalid)
}

func testTrainSteps(t *testing.T, s store.Store) {
	c := ctx(t)
	if got := must(s.ListTrainSteps(c, "")); len(got) != 0 {
		t.Fatalf("empty store has steps %v", got)
	}
	at := time.Date(2025, 1, 2, 3, 4, 5, 6000, time.UTC)
	put := func(run string, mode store.Mode, step int64, m string) {
		t.Helper()
		if err := s.PutTrainStep(c, store.TrainStep{Run: run, Mode: mode, Step: step, Time: at, Metrics: json.RawMessage(m)}); err != nil {
			t.Fatalf("put %s %s %d: %v", run, mode, step, err)
		}
	}
	put("a", store.ModeTrain, 2, `{"reward_mean":0.5}`)
	put("a", store.ModeTrain, 1, `{"reward_mean":0.25}`)
	put("a", store.ModeVal, 0, `{"reward_mean":0.1}`)
	put("b", store.ModeTrain, 1, `{"reward_mean":0.9}`)
	put("a", store.ModeTrain, 2, `{"reward_mean":0.75}`) // a resumed run redoes step 2
	got := must(s.ListTrainSteps(c, "a"))
	var keys []string
	for _, st := range got {
		keys = append(keys, fmt.Sprintf("%s/%s/%d", st.Run, st.Mode, st.Step))
	}
	if fmt.Sprint(keys) != "[a/train/1 a/train/2 a/val/0]" {
		t.Fatalf("steps of run a %v", keys)
	}
	var m struct {
		Reward float64 `json:"reward_mean"`
	}
	if err := json.Unmarshal(got[1].Metrics, &m); err != nil || m.Reward != 0.75 {
		t.Errorf("replaced step metrics %s", got[1].Metrics)
	}
	if !got[0].Time.Equal(at) {
		t.Errorf("time %v, want %v", got[0].Time, at)
	}
	if all := must(s.ListTrainSteps(c, "")); len(all) != 4 {
		t.Errorf("all runs: %d steps, want 4", len(all))
	}
	if err := s.PutTrainStep(c, store.TrainStep{Run: "a", Mode: store.ModeTrain, Step: 3}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("no metrics: %v, want invalid", err)
	}
	if err := s.PutTrainStep(c, store.TrainStep{Run: "a", Mode: "x", Step: 3, Metrics: json.RawMessage(`{}`)}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("bad mode: %v, want invalid", err)
	}
	if err := s.PutTrainStep(c, store.TrainStep{Mode: store.ModeTrain, Metrics: json.RawMessage(`{}`)}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("no run: %v, want invalid", err)
	}
	// A zero time is set to now.
	before := time.Now().Add(-time.Second)
	must(0, s.PutTrainStep(c, store.TrainStep{Run: "c", Mode: store.ModeTrain, Metrics: json.RawMessage(`{}`)}))
	if st := must(s.ListTrainSteps(c, "c")); len(st) != 1 || st[0].Time.Before(before) {
		t.Errorf("zero time not set to now: %+v", st)
	}
}

func testWorkers(t *testing.T, s store.Store) {
	c := ctx(t)
	start := time.Now().Add(-time.Second)
	if w := must(s.Workers(c, start)); len(w) != 0 {
		t.Fatalf("workers of an empty store %v", w)
	}
	create(t, s, store.NewRollout{ID: "a"}, store.NewRollout{ID: "b"}, store.NewRollout{ID: "c"}, store.NewRollout{ID: "d"})
	ca := must(s.Claim(c, store.ClaimRequest{WorkerID: "w1"}))
	cb := must(s.Claim(c, store.ClaimRequest{WorkerID: "w1"}))
	must(s.Claim(c, store.ClaimRequest{WorkerID: "w1"}))
	must(s.Claim(c, store.ClaimRequest{WorkerID: "w2"}))
	must(s.CompleteAttempt(c, "a", ca.Attempt.ID, store.AttemptSucceeded, ""))
	must(s.CompleteAttempt(c, "b", cb.Attempt.ID, store.AttemptFailed, "boom"))
	ws := must(s.Workers(c, start))
	if len(ws) != 2 {
		t.Fatalf("workers %+v", ws)
	}
	w1, w2 := ws[0], ws[1]
	if w1.ID != "w1" || w1.Running != 1 || w1.Attempts != 3 || w1.Failed != 1 || w1.LastSeen.Before(start) {
		t.Errorf("w1 %+v", w1)
	}
	if w2.ID != "w2" || w2.Running != 1 || w2.Attempts != 1 || w2.Failed != 0 {
		t.Errorf("w2 %+v", w2)
	}
	// Later: only running attempts count.
	ws = must(s.Workers(c, time.Now().Add(time.Hour)))
	if len(ws) != 2 || ws[0].Attempts != 1 || ws[0].Running != 1 || ws[0].Failed != 0 {
		t.Errorf("workers with only running attempts %+v", ws)
	}
}

// testConcurrentAppendsManyAttempts: writers on different rollouts append
// one call after another (as harnesses do through the gateway, which may
// share transactions among them); every acked event is stored once, with
// the sequence number it was acked with, each call's events contiguous and
// each writer's calls in order.
func testConcurrentAppendsManyAttempts(t *testing.T, s store.Store) {
	c := ctx(t)
	const writers, calls = 12, 25
	claims := make([]store.Claim, writers)
	for w := range claims {
		create(t, s, store.NewRollout{ID: fmt.Sprint("r", w)})
		claims[w] = claim(t, s)
	}
	acked := make([][]store.Event, writers)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := claims[w]
			for k := range calls {
				evs := make([]store.NewEvent, 1+k%3)
				for i := range evs {
					evs[i] = store.NewEvent{Type: store.EventModelRequest, Data: json.RawMessage(fmt.Sprintf(`{"k":%d,"i":%d}`, k, i))}
				}
				out, err := s.AppendEvents(c, cl.Rollout.ID, cl.Attempt.ID, evs)
				if err != nil {
					errs <- err
					return
				}
				if len(out) != len(evs) {
					errs <- fmt.Errorf("writer %d: %d events returned for %d", w, len(out), len(evs))
					return
				}
				acked[w] = append(acked[w], out...)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for w, cl := range claims {
		got := must(s.ListEvents(c, store.EventFilter{RolloutID: cl.Rollout.ID}))
		if len(got) != len(acked[w]) {
			t.Fatalf("writer %d: %d events stored, %d acked", w, len(got), len(acked[w]))
		}
		k, i := 0, 0
		for j, e := range got {
			if e.Seq != acked[w][j].Seq || string(e.Data) != string(acked[w][j].Data) || e.AttemptID != cl.Attempt.ID {
				t.Fatalf("writer %d event %d: stored %+v, acked %+v", w, j, e, acked[w][j])
			}
			var d struct{ K, I int }
			json.Unmarshal(e.Data, &d)
			if d.K != k || d.I != i {
				t.Fatalf("writer %d event %d is %s, want call %d item %d", w, j, e.Data, k, i)
			}
			if i++; i == 1+k%3 {
				k, i = k+1, 0
			}
		}
	}
}

// testAppendsRacingCompletion: appends racing an attempt's completion
// either land before it (and are stored) or are refused with ErrConflict
// (and are not); nothing is stored after the attempt ended.
func testAppendsRacingCompletion(t *testing.T, s store.Store) {
	racingCompletion(t, s, func(c context.Context, rid, aid string, evs []store.NewEvent) error {
		_, err := s.AppendEvents(c, rid, aid, evs)
		return err
	})
}

// testRecordsRacingCompletion: the same with EventRecorder.RecordEvents.
func testRecordsRacingCompletion(t *testing.T, s store.Store) {
	r, ok := s.(store.EventRecorder)
	if !ok {
		t.Skip("the store records events only by appending them")
	}
	racingCompletion(t, s, r.RecordEvents)
}

func racingCompletion(t *testing.T, s store.Store, write func(c context.Context, rid, aid string, evs []store.NewEvent) error) {
	c := ctx(t)
	create(t, s, store.NewRollout{ID: "r"}, store.NewRollout{ID: "other"})
	cl := claim(t, s)
	other := claim(t, s)
	const writers = 6
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		acked    = map[string]bool{}
		refused  int
		otherAck int
	)
	stop := make(chan struct{})
	errs := make(chan error, writers+1)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				data := fmt.Sprintf(`{"w":%d,"k":%d}`, w, k)
				err := write(c, "r", cl.Attempt.ID, []store.NewEvent{{Type: "log", Data: json.RawMessage(data)}})
				if errors.Is(err, store.ErrConflict) {
					mu.Lock()
					refused++
					mu.Unlock()
					return
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				acked[data] = true
				mu.Unlock()
			}
		}()
	}
	// Another attempt keeps appending meanwhile: the refusals must not
	// touch it.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := write(c, "other", other.Attempt.ID, []store.NewEvent{{Type: "log"}}); err != nil {
				errs <- fmt.Errorf("other attempt: %w", err)
				return
			}
			mu.Lock()
			otherAck++
			mu.Unlock()
		}
	}()
	time.Sleep(30 * time.Millisecond)
	must(s.CompleteAttempt(c, "r", cl.Attempt.ID, store.AttemptSucceeded, ""))
	time.Sleep(10 * time.Millisecond)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if refused != writers {
		t.Fatalf("%d writers refused after completion, want %d", refused, writers)
	}
	got := must(s.ListEvents(c, store.EventFilter{RolloutID: "r"}))
	if len(got) != len(acked) {
		t.Fatalf("%d events stored, %d acked", len(got), len(acked))
	}
	for _, e := range got {
		if !acked[string(e.Data)] {
			t.Fatalf("stored event %s was never acked", e.Data)
		}
	}
	if n := len(must(s.ListEvents(c, store.EventFilter{RolloutID: "other"}))); n != otherAck {
		t.Fatalf("other attempt: %d stored, %d acked", n, otherAck)
	}
}

// testBadAppendFailsAlone: an append the database refuses (a NUL byte in
// the event type, which PostgreSQL cannot store in text) fails on its own;
// concurrent appends of other calls are stored.
func testBadAppendFailsAlone(t *testing.T, s store.Store) {
	c := ctx(t)
	create(t, s, store.NewRollout{ID: "r"})
	cl := claim(t, s)
	const calls = 40
	var wg sync.WaitGroup
	results := make([]error, calls)
	for k := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			typ := "log"
			if k%10 == 3 {
				typ = "bad\x00type"
			}
			_, results[k] = s.AppendEvents(c, "r", cl.Attempt.ID, []store.NewEvent{{Type: typ, Data: json.RawMessage(fmt.Sprint(k))}})
		}()
	}
	wg.Wait()
	ok := 0
	for k, err := range results {
		switch {
		case err == nil:
			ok++
		case k%10 == 3 && errors.Is(err, store.ErrInvalid):
		default:
			t.Errorf("call %d: %v", k, err)
		}
	}
	if n := len(must(s.ListEvents(c, store.EventFilter{RolloutID: "r"}))); n != ok {
		t.Fatalf("%d events stored, %d acked", n, ok)
	}
	t.Logf("%d of %d appends stored", ok, calls)
}

// testRecordedEvents: events recorded through EventRecorder are read back
// at once, in call order with appended ones, by concurrent writers too.
func testRecordedEvents(t *testing.T, s store.Store) {
	r, ok := s.(store.EventRecorder)
	if !ok {
		t.Skip("the store records events only by appending them")
	}
	c := ctx(t)
	const writers, calls = 8, 30
	claims := make([]store.Claim, writers)
	for w := range claims {
		create(t, s, store.NewRollout{ID: fmt.Sprint("r", w)})
		claims[w] = claim(t, s)
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := claims[w]
			for k := range calls {
				evs := []store.NewEvent{{Type: store.EventModelRequest, Data: json.RawMessage(fmt.Sprint(k))}}
				var err error
				if k%5 == 4 {
					_, err = s.AppendEvents(c, cl.Rollout.ID, cl.Attempt.ID, evs)
				} else {
					err = r.RecordEvents(c, cl.Rollout.ID, cl.Attempt.ID, evs)
				}
				if err != nil {
					errs <- err
					return
				}
				// Read-your-writes: the call just made is visible.
				got, err := s.ListEvents(c, store.EventFilter{RolloutID: cl.Rollout.ID})
				if err != nil {
					errs <- err
					return
				}
				if len(got) != k+1 || string(got[k].Data) != fmt.Sprint(k) {
					errs <- fmt.Errorf("writer %d after call %d: %d events listed, want %d", w, k, len(got), k+1)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for w, cl := range claims {
		got := must(s.ListEvents(c, store.EventFilter{RolloutID: cl.Rollout.ID}))
		for k, e := range got {
			if string(e.Data) != fmt.Sprint(k) || (k > 0 && e.Seq <= got[k-1].Seq) {
				t.Fatalf("writer %d event %d: %+v", w, k, e)
			}
		}
	}
	// Completing reads the recorded reward.
	cl := claims[0]
	if err := r.RecordEvents(c, cl.Rollout.ID, cl.Attempt.ID, []store.NewEvent{{Type: store.EventReward, Data: json.RawMessage(`{"value":0.5}`)}}); err != nil {
		t.Fatal(err)
	}
	ro := must(s.CompleteAttempt(c, cl.Rollout.ID, cl.Attempt.ID, store.AttemptSucceeded, ""))
	if ro.Reward == nil || *ro.Reward != 0.5 {
		t.Fatalf("reward after completion: %v", ro.Reward)
	}
}

// testModelCallsReadBack stores a long-horizon rollout's model_request
// events (two agents, a history rewrite, rewards between, several calls in
// one batch, appended and recorded) and reads them back exactly as
// written, whole and through every filter.
func testModelCallsReadBack(t *testing.T, s store.Store) {
	c := ctx(t)
	create(t, s, store.NewRollout{ID: "r"})
	cl := claim(t, s)
	calls, _ := Conversation([]string{"", "critic"}, 30, 2000)
	rec, _ := s.(store.EventRecorder)
	var want []store.Event
	write := func(k int, evs []store.NewEvent) {
		if rec != nil && k%2 == 0 {
			if err := rec.RecordEvents(c, "r", cl.Attempt.ID, evs); err != nil {
				t.Fatal(err)
			}
		} else {
			must(s.AppendEvents(c, "r", cl.Attempt.ID, evs))
		}
		for _, e := range evs {
			want = append(want, store.Event{Type: e.Type, Data: e.Data})
		}
	}
	for k := 0; k < len(calls); {
		var evs []store.NewEvent
		n := 1 + k%3 // batches of 1 to 3 calls
		for i := 0; i < n && k < len(calls); i, k = i+1, k+1 {
			evs = append(evs, store.NewEvent{Type: store.EventModelRequest, Data: calls[k], DataValid: k%2 == 0})
			if k%4 == 0 {
				evs = append(evs, store.NewEvent{Type: store.EventReward, Data: json.RawMessage(fmt.Sprintf(`{"value":%d}`, k))})
			}
		}
		write(k, evs)
	}
	all := must(s.ListEvents(c, store.EventFilter{RolloutID: "r"}))
	if len(all) != len(want) {
		t.Fatalf("%d events listed, %d written", len(all), len(want))
	}
	for i, e := range all {
		if e.Type != want[i].Type || string(e.Data) != string(want[i].Data) {
			t.Fatalf("event %d (%s) reads back different from what was written", i, e.Type)
		}
	}
	for _, f := range []store.EventFilter{
		{AfterSeq: all[len(all)/2].Seq},
		{AfterSeq: all[len(all)-2].Seq},
		{AfterSeq: all[5].Seq, Limit: 3},
		{Types: []string{store.EventModelRequest}},
		{Types: []string{store.EventReward}},
		{AttemptID: cl.Attempt.ID, AfterSeq: all[10].Seq, Types: []string{store.EventModelRequest}, Limit: 2},
		// Newest first: the latest calls of a long attempt (the proxy's
		// token state on another replica).
		{Desc: true, Limit: 3},
		{Desc: true, Types: []string{store.EventModelRequest}, Limit: 4},
		{Desc: true, AttemptID: cl.Attempt.ID, AfterSeq: all[len(all)-9].Seq},
	} {
		f.RolloutID = "r"
		got := must(s.ListEvents(c, f))
		var exp []store.Event
		src := all
		if f.Desc {
			src = slices.Clone(all)
			slices.Reverse(src)
		}
		for _, e := range src {
			if e.Seq > f.AfterSeq && (len(f.Types) == 0 || f.Types[0] == e.Type) && (f.Limit == 0 || len(exp) < f.Limit) {
				exp = append(exp, e)
			}
		}
		if len(got) != len(exp) {
			t.Fatalf("filter %+v: %d events, want %d", f, len(got), len(exp))
		}
		for i := range got {
			if got[i].Seq != exp[i].Seq || string(got[i].Data) != string(exp[i].Data) {
				t.Fatalf("filter %+v: event %d differs", f, got[i].Seq)
			}
		}
	}
	ro := must(s.CompleteAttempt(c, "r", cl.Attempt.ID, store.AttemptSucceeded, ""))
	if ro.Reward == nil || *ro.Reward != 28 {
		t.Fatalf("reward after completion: %v, want the last (28)", ro.Reward)
	}
}

// testPrune deletes terminal rollouts by age, step and size (a dry run
// first), never one that runs or waits, and leaves the others' events
// readable.
func testPrune(t *testing.T, s store.Store) {
	p, ok := s.(store.Pruner)
	if !ok {
		t.Skip("the store does not prune")
	}
	c := ctx(t)
	calls, _ := Conversation([]string{""}, 6, 1000)
	// done-0..3 end one after another (steps 0..3), with a rollout's
	// calls; run-0 keeps running, wait-0 queuing.
	var mid time.Time
	for i := 0; i < 4; i++ {
		create(t, s, store.NewRollout{ID: fmt.Sprint("done-", i), Step: step(int64(i))})
		cl := claim(t, s)
		for _, d := range calls {
			must(s.AppendEvents(c, cl.Rollout.ID, cl.Attempt.ID, []store.NewEvent{{Type: store.EventModelRequest, Data: d}}))
		}
		status := store.AttemptSucceeded
		if i == 1 {
			status = store.AttemptFailed
		}
		must(s.CompleteAttempt(c, cl.Rollout.ID, cl.Attempt.ID, status, ""))
		time.Sleep(20 * time.Millisecond)
		if i == 1 {
			mid = time.Now()
			time.Sleep(20 * time.Millisecond)
		}
	}
	create(t, s, store.NewRollout{ID: "run-0", Step: step(0)})
	run := claim(t, s)
	for _, d := range calls {
		must(s.AppendEvents(c, "run-0", run.Attempt.ID, []store.NewEvent{{Type: store.EventModelRequest, Data: d}}))
	}
	create(t, s, store.NewRollout{ID: "wait-0", Step: step(0)})

	_, err := p.Prune(c, store.PruneFilter{})
	wantErr(t, err, store.ErrInvalid)
	pruned := func(res store.PruneResult) []string {
		var out []string
		for _, r := range res.Rollouts {
			out = append(out, r.ID)
			if r.Events != int64(len(calls)) || r.Bytes <= 0 || r.EndedAt.IsZero() {
				t.Errorf("pruned %+v: want %d events, their bytes and end", r, len(calls))
			}
		}
		return out
	}
	kept := []string{"done-0", "done-1", "done-2", "done-3", "run-0", "wait-0"}
	for _, tc := range []struct {
		name string
		f    store.PruneFilter
		want []string
	}{
		{"dry run by age", store.PruneFilter{OlderThan: mid, DryRun: true}, []string{"done-0", "done-1"}},
		{"by step", store.PruneFilter{BeforeStep: step(1)}, []string{"done-0"}},
		{"by age and step", store.PruneFilter{OlderThan: time.Now(), BeforeStep: step(3)}, []string{"done-1", "done-2"}},
		{"nothing matches", store.PruneFilter{OlderThan: mid}, nil},
		{"by size", store.PruneFilter{MaxBytes: 1}, []string{"done-3"}},
		{"never running or queuing", store.PruneFilter{MaxBytes: 1, BeforeStep: step(100)}, nil},
	} {
		res := must(p.Prune(c, tc.f))
		got := pruned(res)
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Fatalf("%s: pruned %v, want %v", tc.name, got, tc.want)
		}
		if !tc.f.DryRun {
			kept = slices.DeleteFunc(kept, func(id string) bool { return slices.Contains(tc.want, id) })
		}
		for _, id := range []string{"done-0", "done-1", "done-2", "done-3", "run-0", "wait-0"} {
			_, err := s.GetRollout(c, id)
			if slices.Contains(kept, id) {
				if err != nil {
					t.Fatalf("%s: %s is gone: %v", tc.name, id, err)
				}
				if id != "wait-0" {
					evs := must(s.ListEvents(c, store.EventFilter{RolloutID: id}))
					if len(evs) != len(calls) || string(evs[len(evs)-1].Data) != string(calls[len(calls)-1]) {
						t.Fatalf("%s: %s's events changed", tc.name, id)
					}
				}
			} else {
				wantErr(t, err, store.ErrNotFound)
				_, err = s.ListEvents(c, store.EventFilter{RolloutID: id})
				wantErr(t, err, store.ErrNotFound)
			}
		}
	}
	// The running attempt still appends and completes.
	must(s.AppendEvents(c, "run-0", run.Attempt.ID, []store.NewEvent{{Type: store.EventReward, Data: json.RawMessage(`{"value":1}`)}}))
	must(s.CompleteAttempt(c, "run-0", run.Attempt.ID, store.AttemptSucceeded, ""))
}

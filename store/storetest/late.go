package storetest

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/aglrl/agl/store"
)

// testLateWriter: events appended to an ended attempt follow the earlier
// ones; unknown attempts are ErrNotFound; a purge removes the rollout,
// its attempts and events, and purging again or an unknown id is fine.
func testLateWriter(t *testing.T, s store.Store) {
	lw, ok := s.(store.LateWriter)
	if !ok {
		t.Skip("store does not implement store.LateWriter")
	}
	c := ctx(t)
	create(t, s, store.NewRollout{ID: "late", Task: json.RawMessage(`1`)}, store.NewRollout{ID: "keep", Task: json.RawMessage(`2`)})
	cl := claim(t, s)
	must(s.AppendEvents(c, cl.Rollout.ID, cl.Attempt.ID, []store.NewEvent{{Type: "custom", Data: json.RawMessage(`{"n":1}`)}}))
	must(s.CompleteAttempt(c, cl.Rollout.ID, cl.Attempt.ID, store.AttemptSucceeded, ""))
	_, err := s.AppendEvents(c, cl.Rollout.ID, cl.Attempt.ID, []store.NewEvent{{Type: "custom", Data: json.RawMessage(`{}`)}})
	wantErr(t, err, store.ErrConflict)
	tests := []struct {
		name, rid, aid string
		kind           error
	}{
		{"ended attempt", cl.Rollout.ID, cl.Attempt.ID, nil},
		{"unknown attempt", cl.Rollout.ID, "nope", store.ErrNotFound},
		{"unknown rollout", "nope", cl.Attempt.ID, store.ErrNotFound},
	}
	for _, tc := range tests {
		out, err := lw.AppendLateEvents(c, tc.rid, tc.aid, []store.NewEvent{{Type: "reward", Data: json.RawMessage(`{"value":0.5}`)}})
		if tc.kind != nil {
			wantErr(t, err, tc.kind)
			continue
		}
		if err != nil || len(out) != 1 || out[0].Seq == 0 {
			t.Fatalf("%s: %+v %v", tc.name, out, err)
		}
	}
	evs := must(s.ListEvents(c, store.EventFilter{RolloutID: cl.Rollout.ID}))
	if len(evs) != 2 || evs[0].Type != "custom" || evs[1].Type != "reward" || evs[1].Seq <= evs[0].Seq {
		t.Fatalf("events after late append: %+v", evs)
	}
	if _, err := lw.AppendLateEvents(c, cl.Rollout.ID, cl.Attempt.ID, []store.NewEvent{{Type: ""}}); err == nil {
		t.Fatal("empty event type accepted")
	}
	for range 2 {
		if err := lw.PurgeRollout(c, cl.Rollout.ID); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.GetRollout(c, cl.Rollout.ID)
	wantErr(t, err, store.ErrNotFound)
	if evs, err := s.ListEvents(c, store.EventFilter{RolloutID: cl.Rollout.ID}); len(evs) != 0 || (err != nil && !errors.Is(err, store.ErrNotFound)) {
		t.Fatalf("events left after purge: %+v %v", evs, err)
	}
	if err := lw.PurgeRollout(c, "never-was"); err != nil {
		t.Fatal(err)
	}
	other := "keep"
	if cl.Rollout.ID == "keep" {
		other = "late"
	}
	must(s.GetRollout(c, other))
}

package samples

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/sqlite"
)

// A real SQLite store: rollouts run through claim → events → complete (one
// fails once and is retried); Load pages through them by cursor and
// FromRollouts trains only each rollout's final attempt.
func TestLoadFromSQLite(t *testing.T) {
	// A deadline: a stuck store fails the test instead of hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "agl.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var nr []store.NewRollout
	for i := 0; i < 6; i++ {
		nr = append(nr, store.NewRollout{ID: fmt.Sprintf("r%d", i), GroupID: fmt.Sprintf("g%d", i/3), Task: json.RawMessage(`{}`),
			Config: store.RolloutConfig{MaxAttempts: 2}})
	}
	if _, err := st.CreateRollouts(ctx, nr); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(15, 16))
	done := 0
	failedOnce := false
	for done < 6 {
		cl, err := st.Claim(ctx, store.ClaimRequest{WorkerID: "w"})
		if err != nil {
			t.Fatal(err)
		}
		calls := synthCalls(rng, synthOpts{turns: 3, sysLen: 8, userLen: 4, respLen: 5, toolLen: 3})
		var ne []store.NewEvent
		for _, c := range calls {
			b, _ := json.Marshal(c)
			ne = append(ne, store.NewEvent{Type: store.EventModelRequest, Data: b})
		}
		ne = append(ne, store.NewEvent{Type: store.EventReward, Data: json.RawMessage(fmt.Sprint(done % 2))})
		if _, err := st.AppendEvents(ctx, cl.Rollout.ID, cl.Attempt.ID, ne); err != nil {
			t.Fatal(err)
		}
		status := store.AttemptSucceeded
		if cl.Rollout.ID == "r1" && !failedOnce {
			status, failedOnce = store.AttemptFailed, true
		} else {
			done++
		}
		if _, err := st.CompleteAttempt(ctx, cl.Rollout.ID, cl.Attempt.ID, status, ""); err != nil {
			t.Fatal(err)
		}
	}
	rs, evs, next, err := Load(ctx, st, 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 4 || next == 0 {
		t.Fatalf("first page: %d rollouts, next %d", len(rs), next)
	}
	rs2, evs2, next2, err := Load(ctx, st, next, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs2) != 2 || next2 <= next {
		t.Fatalf("second page: %d rollouts, next %d after %d", len(rs2), next2, next)
	}
	rs3, _, next3, err := Load(ctx, st, next2, 0)
	if err != nil || len(rs3) != 0 || next3 != next2 {
		t.Fatalf("third page: %d rollouts, next %d, %v", len(rs3), next3, err)
	}
	for id, e := range evs2 {
		evs[id] = e
	}
	rs = append(rs, rs2...)
	res, err := FromRollouts(rs, evs, Config{Aggregation: TokenMean})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stats.Rollouts != 6 || res.Stats.Samples != 6 || res.Stats.Calls != 18 {
		t.Fatalf("stats %s", res.Stats)
	}
	for _, s := range res.Samples {
		if s.RolloutID == "r1" {
			r1 := rs[slicesIndex(rs, "r1")]
			if len(r1.Attempts) != 2 || s.AttemptID != r1.Attempts[len(r1.Attempts)-1].ID {
				t.Fatalf("r1 trained attempt %s of %+v", s.AttemptID, r1.Attempts)
			}
		}
	}
}

func slicesIndex(rs []store.Rollout, id string) int {
	for i := range rs {
		if rs[i].ID == id {
			return i
		}
	}
	return -1
}

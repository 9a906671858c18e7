package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/sqlite"
	"github.com/aglrl/agl/store/storetest"
)

func open(t testing.TB) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "agl.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// claimOne creates rollout "r" in s and claims it.
func claimOne(t testing.TB, s *sqlite.Store) store.Claim {
	t.Helper()
	ctx := context.Background()
	if _, err := s.CreateRollouts(ctx, []store.NewRollout{{ID: "r"}}); err != nil {
		t.Fatal(err)
	}
	cl, err := s.Claim(ctx, store.ClaimRequest{WorkerID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t) })
}

func TestBadSynchronous(t *testing.T) {
	_, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "x.db"), sqlite.Options{Synchronous: "OFF"})
	if err == nil {
		t.Fatal("synchronous OFF accepted")
	}
}

func BenchmarkStore(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) store.Store { return open(b) })
}

// TestMigrateStep opens a database made before rollouts had a step column:
// the column is added and filled from each rollout's metadata.
func TestMigrateStep(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateRollouts(ctx, []store.NewRollout{
		{ID: "a", Metadata: json.RawMessage(`{"step":4}`)}, {ID: "b"}, {ID: "c", Metadata: json.RawMessage(`{"x":1}`)},
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Turn it back into the old schema.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`DROP INDEX rollouts_step`, `DROP INDEX attempts_started`, `DROP TABLE train_steps`, `ALTER TABLE rollouts DROP COLUMN step`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	s, err = sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	four := int64(4)
	rs, _, err := s.ListRollouts(ctx, store.RolloutFilter{Step: &four})
	if err != nil || len(rs) != 1 || rs[0].ID != "a" || rs[0].Step == nil || *rs[0].Step != 4 {
		t.Fatalf("step 4 after migration: %v %+v", err, rs)
	}
	if r, err := s.GetRollout(ctx, "c"); err != nil || r.Step != nil {
		t.Fatalf("rollout without step: %v %+v", err, r.Step)
	}
	if err := s.PutTrainStep(ctx, store.TrainStep{Run: "r", Mode: store.ModeTrain, Metrics: json.RawMessage(`{}`)}); err != nil {
		t.Fatalf("train steps after migration: %v", err)
	}
}

// TestBackgroundCheckpoint: committed WAL frames reach the database file
// without any commit checkpointing (the writer's own threshold is far off).
func TestBackgroundCheckpoint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agl.db")
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	cl := claimOne(t, s)
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	data := json.RawMessage(`"` + strings.Repeat("x", 2000) + `"`)
	for range 500 {
		if _, err := s.AppendEvents(ctx, "r", cl.Attempt.ID, []store.NewEvent{{Type: "log", Data: data}}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > before.Size()+500*2000 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("database file %d bytes (was %d): the WAL was not checkpointed", fi.Size(), before.Size())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

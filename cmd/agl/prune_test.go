package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/sqlite"
	"github.com/aglrl/agl/store/storetest"
)

// TestStorePrune runs `agl store prune` on a data dir: bad flags are
// one-line errors, a dry run lists what would go and deletes nothing, a
// prune deletes only ended rollouts, and a data dir in use is refused.
func TestStorePrune(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin, err := buildAgl()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dataDir := t.TempDir()
	path := filepath.Join(dataDir, "agl.db")
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	calls, _ := storetest.Conversation([]string{""}, 10, 4096)
	for i := 0; i < 4; i++ {
		step := int64(i)
		id := fmt.Sprint("r", i)
		if _, err := st.CreateRollouts(ctx, []store.NewRollout{{ID: id, Step: &step}}); err != nil {
			t.Fatal(err)
		}
		cl, err := st.Claim(ctx, store.ClaimRequest{WorkerID: "w"})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range calls {
			if _, err := st.AppendEvents(ctx, id, cl.Attempt.ID, []store.NewEvent{{Type: store.EventModelRequest, Data: d}}); err != nil {
				t.Fatal(err)
			}
		}
		if i < 3 {
			if _, err := st.CompleteAttempt(ctx, id, cl.Attempt.ID, store.AttemptSucceeded, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "say what to prune"},
		{[]string{"--older-than", "soon"}, `--older-than "soon": want a duration`},
		{[]string{"--max-bytes", "lots"}, `--max-bytes "lots": want a positive size`},
		{[]string{"--before-step", "-2"}, "--before-step -2 is negative"},
		{[]string{"--max-bytes", "1", "extra"}, "unexpected arguments"},
	} {
		_, stderr, err := aglRun(bin, append([]string{"store", "prune", "--data-dir", dataDir}, tc.args...)...)
		if err == nil || !strings.Contains(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("prune %v: %v, stderr %q, want one line with %q", tc.args, err, stderr, tc.want)
		}
	}
	// In use: the store is still open here.
	_, stderr, err := aglRun(bin, "store", "prune", "--data-dir", dataDir, "--max-bytes", "1")
	if err == nil || !strings.Contains(stderr, "in use") {
		t.Fatalf("prune of a data dir in use: %v %q", err, stderr)
	}
	st.Close()

	stdout, stderr, err := aglRun(bin, "store", "prune", "--data-dir", dataDir, "--before-step", "2", "--dry-run")
	if err != nil || !strings.Contains(stdout, "would prune r0\t") || !strings.Contains(stdout, "would prune r1\t") ||
		strings.Contains(stdout, "r2\t") || !strings.Contains(stdout, "would prune 2 rollouts") {
		t.Fatalf("dry run: %v\n%s%s", err, stdout, stderr)
	}
	stdout, stderr, err = aglRun(bin, "store", "prune", "--data-dir", dataDir, "--max-bytes", "1")
	if err != nil || !strings.Contains(stdout, "pruned 3 rollouts") || strings.Contains(stdout, "r3\t") || !strings.Contains(stdout, "store files") {
		t.Fatalf("prune: %v\n%s%s", err, stdout, stderr)
	}
	st, err = sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i := 0; i < 4; i++ {
		_, err := st.GetRollout(ctx, fmt.Sprint("r", i))
		if (i < 3) != (err != nil) {
			t.Errorf("rollout r%d after prune: %v", i, err)
		}
	}
	evs, err := st.ListEvents(ctx, store.EventFilter{RolloutID: "r3"})
	if err != nil || len(evs) != len(calls) || string(evs[len(evs)-1].Data) != string(calls[len(calls)-1]) {
		t.Fatalf("running rollout's events after prune: %d, %v", len(evs), err)
	}
}

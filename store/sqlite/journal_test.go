package sqlite_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/sqlite"
)

// TestJournalCrashReplay records events that stay in the journal (the
// applier is held), SIGKILLs the process, tears the journal's tail as a
// crash mid-write would, and reopens: every recorded event is there, in
// order, after the ones appended before.
func TestJournalCrashReplay(t *testing.T) {
	if os.Getenv("AGL_JOURNAL_CHILD") != "" {
		journalChild(os.Getenv("AGL_JOURNAL_CHILD"))
		return
	}
	path := filepath.Join(t.TempDir(), "agl.db")
	cmd := exec.Command(os.Args[0], "-test.run", "^TestJournalCrashReplay$")
	cmd.Env = append(os.Environ(), "AGL_JOURNAL_CHILD="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	var attempt string
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "recorded "); ok {
			attempt = a
			break
		}
	}
	if attempt == "" {
		t.Fatal("child did not record")
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	// A record torn by the crash: never acknowledged, dropped on replay.
	f, err := os.OpenFile(path+"-events", os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{200, 0, 0, 0, 1, 2, 3})
	f.Close()

	s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	evs, err := s.ListEvents(context.Background(), store.EventFilter{RolloutID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 3+200 {
		t.Fatalf("%d events after replay, want 203", len(evs))
	}
	for i, e := range evs {
		want := fmt.Sprintf(`{"n":%d}`, i)
		if string(e.Data) != want || e.AttemptID != attempt || (i > 0 && e.Seq <= evs[i-1].Seq) {
			t.Fatalf("event %d: %+v, want data %s", i, e, want)
		}
	}
	// The replayed journal was emptied; recording goes on.
	if _, err := os.Stat(path + "-events"); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordEvents(context.Background(), "r", attempt, []store.NewEvent{{Type: "log", Data: json.RawMessage(`{"n":203}`)}}); err != nil {
		t.Fatal(err)
	}
}

// journalChild appends 3 events, records 200 with the applier held, says
// so, and waits to be killed.
func journalChild(path string) {
	sqlite.HoldApply()
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if _, err := s.CreateRollouts(ctx, []store.NewRollout{{ID: "r"}}); err != nil {
		panic(err)
	}
	cl, err := s.Claim(ctx, store.ClaimRequest{WorkerID: "w"})
	if err != nil {
		panic(err)
	}
	for i := range 3 {
		if _, err := s.AppendEvents(ctx, "r", cl.Attempt.ID, []store.NewEvent{{Type: "log", Data: json.RawMessage(`{"n":` + strconv.Itoa(i) + `}`)}}); err != nil {
			panic(err)
		}
	}
	for i := 3; i < 203; i++ {
		if err := s.RecordEvents(ctx, "r", cl.Attempt.ID, []store.NewEvent{{Type: "log", Data: json.RawMessage(`{"n":` + strconv.Itoa(i) + `}`)}}); err != nil {
			panic(err)
		}
	}
	fmt.Println("recorded " + cl.Attempt.ID)
	time.Sleep(time.Minute)
}

// TestJournalRotation: a fully applied journal past its size bound is
// emptied, and nothing recorded is lost across rotations.
func TestJournalRotation(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	cl := claimOne(t, s)
	pad := strings.Repeat("x", 8000)
	const n = 1500 // ~12 MB: at least two rotations
	for i := range n {
		if err := s.RecordEvents(ctx, "r", cl.Attempt.ID, []store.NewEvent{{Type: "log", Data: json.RawMessage(fmt.Sprintf(`{"n":%d,"p":"%s"}`, i, pad))}}); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := s.ListEvents(ctx, store.EventFilter{RolloutID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != n {
		t.Fatalf("%d events, want %d", len(evs), n)
	}
	for i, e := range evs {
		var d struct{ N int }
		json.Unmarshal(e.Data, &d)
		if d.N != i {
			t.Fatalf("event %d holds %d", i, d.N)
		}
	}
	if size := sqlite.JournalSize(s); size > 6<<20 {
		t.Errorf("journal is %d bytes: never emptied", size)
	}
}

// TestJournalRecordRefused: recording to an attempt that is not running
// (or missing) fails as appending does, also right after it ended.
func TestJournalRecordRefused(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	cl := claimOne(t, s)
	ev := []store.NewEvent{{Type: "log"}}
	if err := s.RecordEvents(ctx, "r", cl.Attempt.ID, ev); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompleteAttempt(ctx, "r", cl.Attempt.ID, store.AttemptSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordEvents(ctx, "r", cl.Attempt.ID, ev); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("record after completion: %v", err)
	}
	if err := s.RecordEvents(ctx, "r", "nope", ev); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("record to a missing attempt: %v", err)
	}
	if err := s.RecordEvents(ctx, "r", cl.Attempt.ID, []store.NewEvent{{Type: "x", Data: json.RawMessage(`{`)}}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("invalid data: %v", err)
	}
}

// TestRecordWithoutJournal: with synchronous=FULL there is no journal (a
// write(2) is not as safe as an fsynced commit): recording appends.
func TestRecordWithoutJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agl.db")
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{Synchronous: "FULL"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	cl := claimOne(t, s)
	if err := s.RecordEvents(ctx, "r", cl.Attempt.ID, []store.NewEvent{{Type: "log"}}); err != nil {
		t.Fatal(err)
	}
	if evs, err := s.ListEvents(ctx, store.EventFilter{RolloutID: "r"}); err != nil || len(evs) != 1 {
		t.Fatalf("%v %v", evs, err)
	}
	if _, err := os.Stat(path + "-events"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("journal file with synchronous=FULL: %v", err)
	}
}

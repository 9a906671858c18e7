package sqlite_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/sqlite"
	"github.com/aglrl/agl/store/storetest"
)

// TestEventEncodingAcrossVersions writes a rollout's calls partly as the
// store did before schema version 3 (PlainEvents: each event's JSON) and
// partly in the encoded form, across reopenings (a cold base cache), in
// one attempt; every read returns exactly the JSON written, and the
// encoded rows take a fraction of the space (a reopening does not store
// its first call whole: it is diffed against its stored base).
func TestEventEncodingAcrossVersions(t *testing.T) {
	ctx := context.Background()
	calls, final := storetest.Conversation([]string{""}, 60, 8192)
	for _, tc := range []struct {
		name   string
		phases []bool // PlainEvents of each reopening; calls split evenly
		ratio  float64
	}{
		{"plain then encoded", []bool{true, false}, 0},
		{"encoded, reopened", []bool{false, false, false}, 1.5},
		{"encoded then plain then encoded", []bool{false, true, false}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "agl.db")
			var aid string
			per := len(calls) / len(tc.phases)
			for p, plain := range tc.phases {
				s, err := sqlite.Open(ctx, path, sqlite.Options{PlainEvents: plain})
				if err != nil {
					t.Fatal(err)
				}
				if p == 0 {
					if _, err := s.CreateRollouts(ctx, []store.NewRollout{{ID: "r"}}); err != nil {
						t.Fatal(err)
					}
					cl, err := s.Claim(ctx, store.ClaimRequest{WorkerID: "w"})
					if err != nil {
						t.Fatal(err)
					}
					aid = cl.Attempt.ID
				}
				for _, d := range calls[p*per : (p+1)*per] {
					if err := s.RecordEvents(ctx, "r", aid, []store.NewEvent{{Type: store.EventModelRequest, Data: d, DataValid: true}}); err != nil {
						t.Fatal(err)
					}
				}
				checkEvents(t, s, calls[:(p+1)*per])
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			s, err := sqlite.Open(ctx, path, sqlite.Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			checkEvents(t, s, calls)
			db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var stored int64
			var version int
			if err := db.QueryRow(`SELECT SUM(LENGTH(data)) FROM events`).Scan(&stored); err != nil {
				t.Fatal(err)
			}
			if err := db.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil {
				t.Fatal(err)
			}
			if version != sqlite.SchemaVersion {
				t.Errorf("user_version %d, want %d", version, sqlite.SchemaVersion)
			}
			r := float64(stored) / float64(len(final))
			t.Logf("stored %d bytes of events, %.2f× the final conversation (%d bytes)", stored, r, len(final))
			if tc.ratio > 0 && r > tc.ratio {
				t.Errorf("events take %.2f× the final conversation, want at most %.1f×", r, tc.ratio)
			}
		})
	}
}

// TestStoredFormDeterministic: the same calls are stored as the same bytes
// whatever the journal applier's progress and the base cache hold: written
// back to back (the applier behind), one at a time with the applier caught
// up, and across reopenings (a cold cache: the first call after each is
// diffed against its stored base).
func TestStoredFormDeterministic(t *testing.T) {
	ctx := context.Background()
	calls, final := storetest.Conversation([]string{"", "b"}, 40, 8192)
	write := func(t *testing.T, reopenEvery int, settle bool) [][]byte {
		path := filepath.Join(t.TempDir(), "agl.db")
		s := openAt(t, path)
		if _, err := s.CreateRollouts(ctx, []store.NewRollout{{ID: "r"}}); err != nil {
			t.Fatal(err)
		}
		cl, err := s.Claim(ctx, store.ClaimRequest{WorkerID: "w"})
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range calls {
			if reopenEvery > 0 && i > 0 && i%reopenEvery == 0 {
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				s = openAt(t, path)
			}
			if err := s.RecordEvents(ctx, "r", cl.Attempt.ID, []store.NewEvent{{Type: store.EventModelRequest, Data: d, DataValid: true}}); err != nil {
				t.Fatal(err)
			}
			if settle {
				time.Sleep(15 * time.Millisecond) // past the applier's linger
			}
		}
		checkEvents(t, s, calls)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		rows, err := db.Query(`SELECT data FROM events ORDER BY seq`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out [][]byte
		var total int
		for rows.Next() {
			var d []byte
			if err := rows.Scan(&d); err != nil {
				t.Fatal(err)
			}
			out = append(out, d)
			total += len(d)
		}
		t.Logf("reopen every %d, settle %v: %d bytes stored, %.2f× the final conversation", reopenEvery, settle, total, float64(total)/float64(len(final)))
		return out
	}
	want := write(t, 0, false)
	for _, tc := range []struct {
		name        string
		reopenEvery int
		settle      bool
	}{
		{"back to back again", 0, false},
		{"applier caught up", 0, true},
		{"reopened every 7 calls", 7, false},
		{"reopened every call", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := write(t, tc.reopenEvery, tc.settle)
			if len(got) != len(want) {
				t.Fatalf("%d rows, want %d", len(got), len(want))
			}
			for i := range got {
				if !bytes.Equal(got[i], want[i]) {
					t.Fatalf("call %d stored as %d bytes, %d bytes in the first run: the stored form depends on timing", i, len(got[i]), len(want[i]))
				}
			}
		})
	}
}

// TestJournalCallsWithoutWaiting: calls of one attempt recorded back to
// back while the applier is held do not wait for it (each is journaled
// against the last committed call, its JSON held in memory); once
// applied, each call is stored against the one before it, reads back
// exactly, and the memory is given back.
func TestJournalCallsWithoutWaiting(t *testing.T) {
	calls, _ := storetest.Conversation([]string{""}, 8, 4096)
	release := sqlite.HoldApply()
	path := filepath.Join(t.TempDir(), "agl.db")
	s := openAt(t, path)
	defer s.Close()
	cl := claimOne(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var held int
	for i, d := range calls {
		if err := s.RecordEvents(ctx, "r", cl.Attempt.ID, []store.NewEvent{{Type: store.EventModelRequest, Data: d, DataValid: true}}); err != nil {
			t.Fatalf("call %d with the applier held: %v", i, err)
		}
		if i > 0 {
			held += len(d)
		}
	}
	if got := sqlite.JournalHeld(s); got != int64(held) {
		t.Fatalf("journal holds %d bytes of JSON, want %d (every call after the first)", got, held)
	}
	release()
	checkEvents(t, s, calls)
	if got := sqlite.JournalHeld(s); got != 0 {
		t.Fatalf("journal holds %d bytes of JSON once applied", got)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT seq, data FROM events ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var prev int64
	for rows.Next() {
		var seq int64
		var d []byte
		if err := rows.Scan(&seq, &d); err != nil {
			t.Fatal(err)
		}
		if got := store.BaseSeq(d); got != prev {
			t.Errorf("event %d stored against %d, want the call before it (%d)", seq, got, prev)
		}
		prev = seq
	}
}

func checkEvents(t *testing.T, s store.Store, want [][]byte) {
	t.Helper()
	evs, err := s.ListEvents(context.Background(), store.EventFilter{RolloutID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != len(want) {
		t.Fatalf("%d events, want %d", len(evs), len(want))
	}
	for i, e := range evs {
		if string(e.Data) != string(want[i]) {
			t.Fatalf("event %d reads back different from what was written", i)
		}
	}
	// The last one alone (its bases outside the read).
	last, err := s.ListEvents(context.Background(), store.EventFilter{RolloutID: "r", AfterSeq: evs[len(evs)-2].Seq})
	if err != nil || len(last) != 1 || string(last[0].Data) != string(want[len(want)-1]) {
		t.Fatalf("last event alone: %d events, %v", len(last), err)
	}
}

// TestNewerSchemaRefused: a database written by a newer agl is not opened
// for writing by an older one.
func TestNewerSchemaRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agl.db")
	s := openAt(t, path)
	s.Close()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`PRAGMA user_version = 99`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, err = sqlite.Open(context.Background(), path, sqlite.Options{})
	if err == nil || !strings.Contains(err.Error(), "schema version 99 is newer") {
		t.Fatalf("err = %v", err)
	}
}

func openAt(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPruneReclaims: pruning gives the space back to the file system, on
// a database made with auto_vacuum=INCREMENTAL and on one made before
// (auto_vacuum NONE: VACUUMed once, incremental after).
func TestPruneReclaims(t *testing.T) {
	ctx := context.Background()
	calls, _ := storetest.Conversation([]string{""}, 20, 8192)
	for _, tc := range []struct {
		name     string
		oldStyle bool
	}{{"incremental", false}, {"created without auto_vacuum", true}} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "agl.db")
			if tc.oldStyle {
				db, err := sql.Open("sqlite", "file:"+path)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := db.Exec(`PRAGMA auto_vacuum = NONE; CREATE TABLE x (a)`); err != nil {
					t.Fatal(err)
				}
				db.Close()
			}
			s := openAt(t, path)
			defer s.Close()
			for i := 0; i < 5; i++ {
				id := "r" + string(rune('0'+i))
				if _, err := s.CreateRollouts(ctx, []store.NewRollout{{ID: id}}); err != nil {
					t.Fatal(err)
				}
				cl, err := s.Claim(ctx, store.ClaimRequest{WorkerID: "w"})
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range calls {
					// PlainEvents is not set: big rows come from the
					// first calls of each attempt being whole.
					if _, err := s.AppendEvents(ctx, id, cl.Attempt.ID, []store.NewEvent{{Type: store.EventModelRequest, Data: d}}); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := s.CompleteAttempt(ctx, id, cl.Attempt.ID, store.AttemptSucceeded, ""); err != nil {
					t.Fatal(err)
				}
			}
			res, err := s.Prune(ctx, store.PruneFilter{MaxBytes: 1})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Rollouts) != 5 || res.Kept != 0 {
				t.Fatalf("pruned %d rollouts, kept %d bytes", len(res.Rollouts), res.Kept)
			}
			t.Logf("file %d -> %d bytes (events %d)", res.FileBytesBefore, res.FileBytesAfter, res.Bytes)
			if res.FileBytesAfter >= res.FileBytesBefore-res.Bytes/2 {
				t.Errorf("file %d -> %d bytes after pruning %d bytes of events", res.FileBytesBefore, res.FileBytesAfter, res.Bytes)
			}
			s.Close()
			db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var mode int
			if err := db.QueryRow(`PRAGMA auto_vacuum`).Scan(&mode); err != nil || mode != 2 {
				t.Errorf("auto_vacuum %d (%v), want 2 (incremental)", mode, err)
			}
		})
	}
}

// TestJournalCrashReplayModelCalls: model calls recorded in the journal
// while the applier is held survive a SIGKILL; replayed, every call reads
// back exactly. Each is journaled against the attempt's last committed
// call (the ones before it still wait in the journal), so each record
// reads back on its own.
func TestJournalCrashReplayModelCalls(t *testing.T) {
	calls, _ := storetest.Conversation([]string{"", "b"}, 24, 4096)
	if path := os.Getenv("AGL_JOURNAL_CALLS_CHILD"); path != "" {
		journalCallsChild(path, calls)
		return
	}
	path := filepath.Join(t.TempDir(), "agl.db")
	cmd := exec.Command(os.Args[0], "-test.run", "^TestJournalCrashReplayModelCalls$")
	cmd.Env = append(os.Environ(), "AGL_JOURNAL_CALLS_CHILD="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	ok := false
	for sc.Scan() {
		if sc.Text() == "recorded" {
			ok = true
			break
		}
	}
	if !ok {
		t.Fatal("child did not record")
	}
	fi, err := os.Stat(path + "-events")
	if err != nil {
		t.Fatal(err)
	}
	whole := len(calls[len(calls)-1])
	t.Logf("journal %d bytes for %d bytes of calls", fi.Size(), whole)
	if fi.Size() > int64(whole/4) {
		t.Errorf("journal %d bytes for %d bytes of calls: not stored encoded", fi.Size(), whole)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkEvents(t, s, calls)
}

// journalCallsChild appends all calls but the last journaledCalls, records
// those with the applier held, says so, and waits to be killed.
const journaledCalls = 3

func journalCallsChild(path string, calls [][]byte) {
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
	for i, d := range calls {
		ev := []store.NewEvent{{Type: store.EventModelRequest, Data: d, DataValid: true}}
		if i < len(calls)-journaledCalls {
			_, err = s.AppendEvents(ctx, "r", cl.Attempt.ID, ev)
		} else {
			err = s.RecordEvents(ctx, "r", cl.Attempt.ID, ev)
		}
		if err != nil {
			panic(err)
		}
	}
	fmt.Println("recorded")
	time.Sleep(time.Minute)
}

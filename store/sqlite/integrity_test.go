package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/sqlite"
)

// journalAcked makes a store at path whose event journal holds acked
// recorded events that were never applied (the applier held, then the
// store closed as a crash leaves it): 3 appended events (in SQLite), then
// acked recorded ones with data {"n":3}… It returns the attempt id.
func journalAcked(t *testing.T, path string, acked int) string {
	t.Helper()
	release := sqlite.HoldApply()
	defer release()
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cl := claimOne(t, s)
	for i := range 3 {
		if _, err := s.AppendEvents(ctx, "r", cl.Attempt.ID, []store.NewEvent{{Type: "log", Data: json.RawMessage(`{"n":` + strconv.Itoa(i) + `}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 3; i < 3+acked; i++ {
		data := fmt.Sprintf(`{"n":%d,"pad":"%s"}`, i, strings.Repeat("p", 60))
		if err := s.RecordEvents(ctx, "r", cl.Attempt.ID, []store.NewEvent{{Type: "log", Data: json.RawMessage(data)}}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close() // the applier is held: the records stay unapplied
	if _, err := os.Stat(path + "-events"); err != nil {
		t.Fatal(err)
	}
	return cl.Attempt.ID
}

// storedNs opens the store at path and returns the "n" of every event of
// rollout r, in order.
func storedNs(t *testing.T, path string) []int {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatalf("open after recovery: %v", err)
	}
	defer s.Close()
	evs, err := s.ListEvents(context.Background(), store.EventFilter{RolloutID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	var ns []int
	for _, e := range evs {
		var d struct{ N int }
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		ns = append(ns, d.N)
	}
	return ns
}

// TestJournalFaults damages a journal holding acked, unapplied events the
// ways a failing disk or a careless hand would, and checks that opening
// either refuses (naming the file, the offset and the recovery command)
// or keeps every intact record, and that Recover then keeps every intact
// record, reports what it dropped, and leaves a store that opens.
func TestJournalFaults(t *testing.T) {
	const acked = 50
	type layout struct {
		path      string
		starts    []int64 // where each record starts
		size      int64
		header    int64
		damagedAt int64 // where the one damaged record starts, -1: none
	}
	flip := func(off int64) func(t *testing.T, l *layout) {
		return func(t *testing.T, l *layout) {
			b, _ := os.ReadFile(l.path)
			b[off] ^= 0x40
			os.WriteFile(l.path, b, 0o644)
		}
	}
	cases := []struct {
		name   string
		damage func(t *testing.T, l *layout)
		// refuse: the offset Open must name (-1: Open must not refuse).
		refuse func(l *layout) int64
		// keep: the records kept (by Open when it does not refuse, by
		// Recover otherwise), as indices into the acked records.
		keep func(l *layout) []int
		lost int // byte ranges Recover reports lost
	}{
		{
			name: "flipped byte mid-file",
			damage: func(t *testing.T, l *layout) {
				l.damagedAt = l.starts[20]
				flip(l.starts[20]+15)(t, l)
			},
			refuse: func(l *layout) int64 { return l.starts[20] },
			keep:   func(l *layout) []int { return allBut(acked, 20) },
			lost:   1,
		},
		{
			name: "flipped byte in a record length",
			damage: func(t *testing.T, l *layout) {
				l.damagedAt = l.starts[30]
				flip(l.starts[30]+1)(t, l)
			},
			refuse: func(l *layout) int64 { return l.starts[30] },
			keep:   func(l *layout) []int { return allBut(acked, 30) },
			lost:   1,
		},
		{
			name:   "deleted journal",
			damage: func(t *testing.T, l *layout) { os.Remove(l.path) },
			refuse: func(l *layout) int64 { return 0 },
			keep:   func(l *layout) []int { return nil }, // nothing intact is left
		},
		{
			name: "zeroed tail appended",
			damage: func(t *testing.T, l *layout) {
				f, _ := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND, 0)
				f.Write(make([]byte, 4096))
				f.Close()
			},
			refuse: func(l *layout) int64 { return -1 },
			keep:   func(l *layout) []int { return allBut(acked, -1) },
		},
		{
			name: "zeroed tail over the last record",
			damage: func(t *testing.T, l *layout) {
				b, _ := os.ReadFile(l.path)
				clear(b[len(b)-40:])
				os.WriteFile(l.path, b, 0o644)
			},
			refuse: func(l *layout) int64 { return l.starts[acked-1] },
			keep:   func(l *layout) []int { return allBut(acked, acked-1) },
			lost:   1,
		},
		{
			name: "header overwritten",
			damage: func(t *testing.T, l *layout) {
				b, _ := os.ReadFile(l.path)
				copy(b, "#!/bin/sh\necho hi\n")
				os.WriteFile(l.path, b, 0o644)
			},
			refuse: func(l *layout) int64 { return 0 },
			keep:   func(l *layout) []int { return allBut(acked, -1) },
		},
		{
			// What two processes writing one data dir left (issue 14).
			name: "generation the database does not know",
			damage: func(t *testing.T, l *layout) {
				if err := sqlite.SetJournalGen(l.path, 3); err != nil {
					t.Fatal(err)
				}
			},
			refuse: func(l *layout) int64 { return 0 },
			keep:   func(l *layout) []int { return allBut(acked, -1) },
		},
		{
			name: "truncated mid-record (a torn final write)",
			damage: func(t *testing.T, l *layout) {
				os.Truncate(l.path, l.starts[acked-1]+20)
			},
			refuse: func(l *layout) int64 { return -1 },
			keep:   func(l *layout) []int { return allBut(acked, acked-1) },
		},
		{
			name: "garbage appended",
			damage: func(t *testing.T, l *layout) {
				f, _ := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND, 0)
				f.Write(bytes.Repeat([]byte("garbage!"), 16))
				f.Close()
			},
			refuse: func(l *layout) int64 { return l.size },
			keep:   func(l *layout) []int { return allBut(acked, -1) },
			lost:   1,
		},
		{
			name: "old format (version 1) journal, flipped byte mid-file",
			damage: func(t *testing.T, l *layout) {
				rewriteV1(t, l.path)
				// Version 1: a 16-byte header, 8-byte record headers.
				l.damagedAt = l.starts[10] - 4 - 4*10
				flip(l.damagedAt+15)(t, l)
			},
			refuse: func(l *layout) int64 { return l.damagedAt },
			keep:   func(l *layout) []int { return allBut(acked, 10) },
			lost:   1,
		},
		{
			name:   "old format (version 1) journal",
			damage: func(t *testing.T, l *layout) { rewriteV1(t, l.path) },
			refuse: func(l *layout) int64 { return -1 },
			keep:   func(l *layout) []int { return allBut(acked, -1) },
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "agl.db")
			journalAcked(t, path, acked)
			l := &layout{path: path + "-events", damagedAt: -1}
			var err error
			if l.starts, l.header, err = sqlite.JournalRecords(l.path); err != nil {
				t.Fatal(err)
			}
			if len(l.starts) != acked {
				t.Fatalf("%d records journaled, want %d", len(l.starts), acked)
			}
			fi, _ := os.Stat(l.path)
			l.size = fi.Size()
			c.damage(t, l)
			want := c.keep(l)

			var logged bytes.Buffer
			opt := sqlite.Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))}
			s, err := sqlite.Open(context.Background(), path, opt)
			if off := c.refuse(l); off >= 0 {
				var je *sqlite.JournalError
				if !errors.As(err, &je) || !errors.Is(err, sqlite.ErrJournalDamaged) {
					if s != nil {
						s.Close()
					}
					t.Fatalf("open: %v, want a refusal", err)
				}
				msg := err.Error()
				for _, w := range []string{l.path, fmt.Sprintf("offset %d", off), "agl store recover --data-dir " + dir} {
					if !strings.Contains(msg, w) {
						t.Errorf("refusal %q does not name %q", msg, w)
					}
				}
				// A refusal changes nothing: refused again.
				if _, err := sqlite.Open(context.Background(), path, opt); !errors.Is(err, sqlite.ErrJournalDamaged) {
					t.Fatalf("second open: %v, want the same refusal", err)
				}
				rec, err := sqlite.Recover(context.Background(), path, sqlite.Options{})
				if err != nil {
					t.Fatalf("recover: %v", err)
				}
				if rec.Events != len(want) || len(rec.Lost) != c.lost {
					t.Errorf("recovery %+v: want %d events kept, %d ranges lost", rec, len(want), c.lost)
				}
				if c.name == "deleted journal" && len(rec.Notes) == 0 {
					t.Error("a deleted journal recovered without a note")
				}
				if l.damagedAt >= 0 && (len(rec.Lost) != 1 || rec.Lost[0].Offset != l.damagedAt) {
					t.Errorf("recovery lost %+v, want the record at %d", rec.Lost, l.damagedAt)
				}
				t.Logf("acknowledged %d, recovered %d; lost %+v; notes %q", acked, rec.Events, rec.Lost, rec.Notes)
			} else {
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				s.Close()
				if len(want) < acked && !strings.Contains(logged.String(), "dropped an incomplete tail") {
					t.Errorf("a dropped tail was not logged: %q", logged.String())
				}
				t.Logf("acknowledged %d, kept on open %d; log %q", acked, len(want), strings.TrimSpace(logged.String()))
			}
			ns := storedNs(t, path)
			wantNs := []int{0, 1, 2}
			for _, k := range want {
				wantNs = append(wantNs, 3+k)
			}
			if fmt.Sprint(ns) != fmt.Sprint(wantNs) {
				t.Fatalf("stored %v, want %v", ns, wantNs)
			}
			// Recovered once: a later open replays nothing again.
			if ns := storedNs(t, path); len(ns) != len(wantNs) {
				t.Fatalf("reopened: %d events, want %d", len(ns), len(wantNs))
			}
		})
	}
}

// allBut is 0..n-1 without skip.
func allBut(n, skip int) []int {
	var out []int
	for i := range n {
		if i != skip {
			out = append(out, i)
		}
	}
	return out
}

// rewriteV1 turns the journal at path into the version 1 format and the
// database's journal offset into what that version stored (its header
// was 16 bytes).
func rewriteV1(t *testing.T, path string) {
	if err := sqlite.RewriteJournalV1(path); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", strings.TrimSuffix(path, "-events"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE journal_state SET off = 16`); err != nil {
		t.Fatal(err)
	}
}

// TestJournalMissingAfterCleanClose: a journal emptied by a clean close
// holds nothing, so its loss is no refusal.
func TestJournalMissingAfterCleanClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agl.db")
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cl := claimOne(t, s)
	if err := s.RecordEvents(context.Background(), "r", cl.Attempt.ID, []store.NewEvent{{Type: "log", Data: json.RawMessage(`{"n":0}`)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path + "-events"); err != nil {
		t.Fatal(err)
	}
	if ns := storedNs(t, path); fmt.Sprint(ns) != "[0]" {
		t.Fatalf("stored %v", ns)
	}
	rec, err := sqlite.Recover(context.Background(), path, sqlite.Options{})
	if err != nil || rec.Events != 0 || len(rec.Lost) != 0 || len(rec.Notes) != 0 {
		t.Fatalf("recover of a healthy store: %+v %v", rec, err)
	}
}

// TestOneWriter: a second writer on a data dir is refused, naming the dir
// and the holder's pid; a read-only store opens beside the writer, sees
// what is applied, says what is not, and leaves the journal untouched.
func TestOneWriter(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agl.db")
	release := sqlite.HoldApply()
	w, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		release()
		t.Fatal(err)
	}
	defer func() {
		w.Close()
		release()
	}()
	ctx := context.Background()
	cl := claimOne(t, w)
	if _, err := w.AppendEvents(ctx, "r", cl.Attempt.ID, []store.NewEvent{{Type: "log", Data: json.RawMessage(`{"n":0}`)}}); err != nil {
		t.Fatal(err)
	}
	for _, opt := range []sqlite.Options{{}, {Synchronous: "FULL"}} {
		_, err := sqlite.Open(ctx, path, opt)
		if !errors.Is(err, sqlite.ErrLocked) {
			t.Fatalf("second writer (%+v): %v", opt, err)
		}
		for _, want := range []string{dir, fmt.Sprintf("pid %d", os.Getpid())} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("refusal %q does not name %q", err, want)
			}
		}
		if _, err := sqlite.Recover(ctx, path, opt); !errors.Is(err, sqlite.ErrLocked) {
			t.Fatalf("recover beside a writer: %v", err)
		}
	}

	// Recorded while the applier is held: in the journal only.
	if err := w.RecordEvents(ctx, "r", cl.Attempt.ID, []store.NewEvent{{Type: "log", Data: json.RawMessage(`{"n":1}`)}}); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path + "-events")
	if err != nil {
		t.Fatal(err)
	}
	ro, err := sqlite.Open(ctx, path, sqlite.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := ro.ListEvents(ctx, store.EventFilter{RolloutID: "r"})
	if err != nil || len(evs) != 1 {
		t.Fatalf("read-only store sees %d events (%v), want the 1 applied", len(evs), err)
	}
	if n, err := ro.JournalBacklog(ctx); err != nil || n == 0 {
		t.Fatalf("read-only backlog %d %v, want the unapplied record", n, err)
	}
	if _, err := ro.CreateRollouts(ctx, []store.NewRollout{{ID: "x"}}); err == nil || !strings.Contains(err.Error(), "readonly") {
		t.Fatalf("a write through a read-only store: %v", err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(path + "-events")
	if !bytes.Equal(before, after) {
		t.Fatal("a read-only open changed the journal")
	}
	if _, err := sqlite.Open(ctx, filepath.Join(dir, "none.db"), sqlite.Options{ReadOnly: true}); err == nil {
		t.Fatal("read-only open of a missing database succeeded")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	release()
	release = func() {}
	// The lock is released with the writer; the held record was journaled.
	if ns := storedNs(t, path); fmt.Sprint(ns) != "[0 1]" {
		t.Fatalf("after the writer closed: %v", ns)
	}
	// Read-only with no writer, after a clean close (no -wal, -shm left).
	for _, suffix := range []string{"-wal", "-shm"} {
		if _, err := os.Stat(path + suffix); err == nil {
			t.Logf("%s still there after a clean close", suffix)
		}
	}
	ro, err = sqlite.Open(ctx, path, sqlite.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if evs, err := ro.ListEvents(ctx, store.EventFilter{RolloutID: "r"}); err != nil || len(evs) != 2 {
		t.Fatalf("read-only after a clean close: %d events, %v", len(evs), err)
	}
	if n, err := ro.JournalBacklog(ctx); err != nil || n != 0 {
		t.Fatalf("backlog after a clean close: %d %v", n, err)
	}
}

// TestFullReplaysJournal: a store opened with synchronous=FULL (no
// journal) first replays the journal an earlier NORMAL run left, and
// refuses a damaged one the same way.
func TestFullReplaysJournal(t *testing.T) {
	for _, damaged := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "agl.db")
		journalAcked(t, path, 10)
		if damaged {
			starts, _, err := sqlite.JournalRecords(path + "-events")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(path + "-events")
			b[starts[5]+20] ^= 1
			os.WriteFile(path+"-events", b, 0o644)
			if _, err := sqlite.Open(context.Background(), path, sqlite.Options{Synchronous: "FULL"}); !errors.Is(err, sqlite.ErrJournalDamaged) {
				t.Fatalf("FULL open of a damaged journal: %v", err)
			}
			continue
		}
		s, err := sqlite.Open(context.Background(), path, sqlite.Options{Synchronous: "FULL"})
		if err != nil {
			t.Fatal(err)
		}
		evs, err := s.ListEvents(context.Background(), store.EventFilter{RolloutID: "r"})
		s.Close()
		if err != nil || len(evs) != 13 {
			t.Fatalf("%d events with FULL (%v), want 13", len(evs), err)
		}
	}
}

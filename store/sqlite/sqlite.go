// Package sqlite is the embedded store backend: one SQLite file in WAL mode
// (modernc.org/sqlite, pure Go). All writes go through one connection, so
// every write transaction is serialized and sequence numbers follow commit
// order; reads use a small pool of their own.
//
// Durability: a write returns only after its transaction committed. With
// synchronous=NORMAL (the default) a commit has written its WAL frames to
// the file but not fsynced them: it survives a crash of the process
// (SIGKILL, panic, OOM kill), not an OS crash or power loss, which may lose
// the last transactions (never corrupt the file). synchronous=FULL fsyncs
// the WAL at every commit and survives those too, at a cost in write rate.
//
// Concurrent AppendEvents calls share transactions (store.GroupCommit),
// each returning once the transaction holding its events committed. With
// synchronous=NORMAL, RecordEvents (store.EventRecorder: the gateway's one
// event per model call) returns once its events are written to the event
// journal, which is as crash-safe as a NORMAL commit and much cheaper, and
// they are applied to SQLite in the background (journal.go). The WAL is
// copied into the database file by a background checkpointer, so no commit
// pays for a checkpoint.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/aglrl/agl/store"
)

// Store implements store.Store on SQLite.
type Store struct {
	w *sql.DB // one writer connection, BEGIN IMMEDIATE
	r *sql.DB // readers

	mu    sync.Mutex
	stmts map[string]*sql.Stmt // prepared on w, reused by every write transaction

	events *store.GroupCommit // batches concurrent AppendEvents into shared transactions
	bases  *store.Bases       // what model_request events are stored against (store/codec.go)
	plain  bool               // Options.PlainEvents
	obs    store.Observer     // Options.Observer, nil for none

	// The WAL is checkpointed in the background (ck, its own connection),
	// off the commit path; see checkpointLoop.
	ck      *sql.DB
	dirty   chan struct{}
	ckStop  chan struct{}
	ckDone  chan struct{}
	closing sync.Once

	journal *journal // nil with synchronous=FULL or read-only (see journal.go)
	lock    *os.File // the data dir's lock (lock.go); nil when read-only
	path    string
	log     *slog.Logger
}

var _ store.Store = (*Store)(nil)

// Options tune the backend.
type Options struct {
	// Synchronous is SQLite's synchronous pragma: "NORMAL" (default) keeps
	// every committed write across a crash of the process; "FULL" also
	// across power loss, at a cost in write rate.
	Synchronous string
	// ReadOnly opens an existing database for reading only, beside a
	// writer that may be running: no lock is taken, nothing is created
	// or migrated, and the event journal is not touched, so events it
	// holds that are not yet applied are not seen (JournalBacklog says
	// how many bytes).
	ReadOnly bool
	// PlainEvents stores every event as its JSON, as stores before schema
	// version 3 did (model_request events in full, a rollout's storage
	// quadratic in its length): only to measure against. Either way
	// rows of both forms are read.
	PlainEvents bool
	// Logger receives warnings (an incomplete journal tail dropped on
	// open); nil: none.
	Logger *slog.Logger
	// Observer, when set, hears of every successful event, reaper and
	// trainer step write.
	Observer store.Observer

	recover *Recovery // set by Recover
}

// Open opens (creating if needed) the database file at path. A store
// opened for writing holds the data dir's lock (path+"-lock") until
// Close: a second writer gets an error wrapping ErrLocked. A damaged
// event journal is refused with a *JournalError (see Recover).
func Open(ctx context.Context, path string, opt Options) (*Store, error) {
	if opt.ReadOnly {
		return openReadOnly(ctx, path, opt)
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("sqlite store: create dir: %w", err)
		}
	}
	lock, err := lockStore(path)
	if err != nil {
		return nil, err
	}
	s, err := openRW(ctx, path, opt)
	if err != nil {
		lock.Close()
		return nil, err
	}
	s.lock = lock
	return s, nil
}

func openRW(ctx context.Context, path string, opt Options) (*Store, error) {
	sync := strings.ToUpper(opt.Synchronous)
	if sync == "" {
		sync = "NORMAL"
	}
	if sync != "NORMAL" && sync != "FULL" {
		return nil, fmt.Errorf("sqlite store: synchronous must be NORMAL or FULL, not %q", opt.Synchronous)
	}
	dsn := func(txlock string, pragmas ...string) string {
		q := url.Values{}
		for _, p := range append([]string{"journal_mode(WAL)", "synchronous(" + sync + ")", "busy_timeout(10000)", "foreign_keys(1)"}, pragmas...) {
			q.Add("_pragma", p)
		}
		q.Set("_txlock", txlock)
		return "file:" + path + "?" + q.Encode()
	}
	// The writer checkpoints only when the background checkpointer falls
	// far behind.
	// auto_vacuum: a new database frees pages incrementally (Prune); an
	// older one takes the setting at its next VACUUM.
	w, err := sql.Open("sqlite", dsn("immediate", fmt.Sprintf("wal_autocheckpoint(%d)", fallbackCheckpointPages), "auto_vacuum(INCREMENTAL)"))
	if err != nil {
		return nil, fmt.Errorf("sqlite store: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	if _, err := w.ExecContext(ctx, schema); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite store: create schema in %s: %w", path, err)
	}
	if err := migrate(ctx, w); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite store: migrate %s: %w", path, err)
	}
	r, err := sql.Open("sqlite", dsn("deferred"))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite store: open %s: %w", path, err)
	}
	r.SetMaxOpenConns(4)
	r.SetMaxIdleConns(4)
	ck, err := sql.Open("sqlite", dsn("deferred"))
	if err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("sqlite store: open %s: %w", path, err)
	}
	ck.SetMaxOpenConns(1)
	ck.SetMaxIdleConns(1)
	s := newStore(w, r, ck, path, opt)
	_, statErr := os.Stat(path + "-events")
	if sync == "NORMAL" || statErr == nil || opt.recover != nil {
		if s.journal, err = openJournal(ctx, s, path+"-events", opt.recover); err != nil {
			s.Close()
			return nil, err
		}
	}
	if sync != "NORMAL" && s.journal != nil {
		// synchronous=FULL keeps no journal: replay what one left (an
		// earlier run with NORMAL) and close it.
		j := s.journal
		s.journal = nil
		if err := j.close(); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

func newStore(w, r, ck *sql.DB, path string, opt Options) *Store {
	log := opt.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{w: w, r: r, ck: ck, stmts: map[string]*sql.Stmt{}, path: path, log: log,
		bases: store.NewBases(store.DefaultBasesBytes), plain: opt.PlainEvents, obs: opt.Observer,
		dirty: make(chan struct{}, 1), ckStop: make(chan struct{}), ckDone: make(chan struct{})}
	s.events = store.NewGroupCommit(s.commitEvents, store.GroupCommitOptions{})
	go s.checkpointLoop()
	return s
}

// openReadOnly opens the database at path for reading (SQLite mode=ro):
// a WAL reader beside a running writer, if any.
func openReadOnly(ctx context.Context, path string, opt Options) (*Store, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("sqlite store: open %s read-only: %w", path, err)
	}
	q := url.Values{}
	q.Set("mode", "ro")
	q.Add("_pragma", "busy_timeout(10000)")
	q.Set("_txlock", "deferred")
	dsn := "file:" + path + "?" + q.Encode()
	var dbs [3]*sql.DB
	for i := range dbs {
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			for _, d := range dbs[:i] {
				d.Close()
			}
			return nil, fmt.Errorf("sqlite store: open %s read-only: %w", path, err)
		}
		dbs[i] = db
	}
	dbs[0].SetMaxOpenConns(1)
	dbs[1].SetMaxOpenConns(4)
	dbs[2].SetMaxOpenConns(1)
	s := newStore(dbs[0], dbs[1], dbs[2], path, opt)
	if err := s.r.PingContext(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlite store: open %s read-only: %w", path, err)
	}
	return s, nil
}

// JournalBacklog is how many bytes of events the event journal holds that
// SQLite does not yet: what a read-only store does not see (a running
// writer applies them within milliseconds; a stopped one on its next
// open). 0 without a journal.
func (s *Store) JournalBacklog(ctx context.Context) (int64, error) {
	if s.journal != nil {
		s.journal.mu.Lock()
		defer s.journal.mu.Unlock()
		return s.journal.written - s.journal.applied, nil
	}
	var gen uint64
	var off int64
	err := s.r.QueryRowContext(ctx, `SELECT gen, off FROM journal_state WHERE id = 1`).Scan(&gen, &off)
	if err != nil {
		if strings.Contains(err.Error(), "no such table") {
			return 0, nil
		}
		return 0, fmt.Errorf("sqlite store: journal state: %w", err)
	}
	f, err := os.Open(s.path + "-events")
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sqlite store: read event journal: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("sqlite store: read event journal: %w", err)
	}
	hdr := make([]byte, headerLen)
	n, _ := f.ReadAt(hdr, 0)
	v, fileGen, problem := readHeader(hdr[:n])
	if problem != "" || fileGen != gen {
		return 0, nil
	}
	return max(0, fi.Size()-max(off, hdrLen(v))), nil
}

// Close closes the database.
func (s *Store) Close() error {
	s.events.Close()
	var jerr error
	s.closing.Do(func() {
		if s.journal != nil {
			jerr = s.journal.close()
		}
		close(s.ckStop)
		<-s.ckDone
	})
	s.mu.Lock()
	for _, st := range s.stmts {
		st.Close()
	}
	s.stmts = map[string]*sql.Stmt{}
	s.mu.Unlock()
	err := errors.Join(jerr, s.ck.Close(), s.r.Close(), s.w.Close())
	if s.lock != nil {
		s.lock.Close() // after the last write
		s.lock = nil
	}
	return err
}

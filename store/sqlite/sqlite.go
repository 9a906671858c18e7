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
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/aglrl/agl/api"
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
		bases: store.NewBases(store.DefaultBasesBytes), plain: opt.PlainEvents,
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

// fallbackCheckpointPages is the WAL size (in pages) at which a committing
// writer checkpoints itself (SQLite's wal_autocheckpoint, default 1000);
// the background checkpointer normally keeps the WAL far below it.
const fallbackCheckpointPages = 20000

// checkpointDelay is how long the checkpointer lets commits accumulate
// after the first one since its last run.
const checkpointDelay = 50 * time.Millisecond

// checkpointLoop copies committed WAL frames into the database file in the
// background (PRAGMA wal_checkpoint(PASSIVE): it blocks neither readers nor
// the writer), so that no commit pays for a checkpoint and its fsyncs, as
// it does with SQLite's automatic checkpoints. Durability is unchanged: a
// commit is durable once in the WAL.
func (s *Store) checkpointLoop() {
	defer close(s.ckDone)
	for {
		select {
		case <-s.ckStop:
			return
		case <-s.dirty:
		}
		select {
		case <-s.ckStop:
			return
		case <-time.After(checkpointDelay):
		}
		// An error (SQLITE_BUSY) leaves the frames for the next run or the
		// writer's fallback.
		s.ck.Exec(`PRAGMA wal_checkpoint(PASSIVE)`)
	}
}

// committed tells the checkpointer that the WAL grew.
func (s *Store) committed() {
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

const schema = `
CREATE TABLE IF NOT EXISTS rollouts (
	seq INTEGER PRIMARY KEY AUTOINCREMENT,
	id TEXT NOT NULL UNIQUE,
	group_id TEXT NOT NULL DEFAULT '',
	task BLOB NOT NULL,
	mode TEXT NOT NULL,
	metadata BLOB,
	timeout_s REAL NOT NULL DEFAULT 0,
	max_attempts INTEGER NOT NULL DEFAULT 1,
	unresponsive_s REAL NOT NULL DEFAULT 0,
	status TEXT NOT NULL,
	num_attempts INTEGER NOT NULL DEFAULT 0,
	error TEXT NOT NULL DEFAULT '',
	reward REAL,
	reward_data BLOB,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	terminal_seq INTEGER,
	step INTEGER
);
CREATE INDEX IF NOT EXISTS rollouts_status ON rollouts(status, seq);
CREATE INDEX IF NOT EXISTS rollouts_group ON rollouts(group_id, seq);
CREATE UNIQUE INDEX IF NOT EXISTS rollouts_terminal ON rollouts(terminal_seq) WHERE terminal_seq IS NOT NULL;
CREATE TABLE IF NOT EXISTS attempts (
	id TEXT PRIMARY KEY,
	rollout_id TEXT NOT NULL REFERENCES rollouts(id),
	number INTEGER NOT NULL,
	worker_id TEXT NOT NULL DEFAULT '',
	status TEXT NOT NULL,
	key_hash BLOB NOT NULL,
	started_at INTEGER NOT NULL,
	last_heartbeat INTEGER NOT NULL,
	ended_at INTEGER,
	error TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS attempts_rollout ON attempts(rollout_id, number);
CREATE INDEX IF NOT EXISTS attempts_running ON attempts(status) WHERE status = 'running';
CREATE TABLE IF NOT EXISTS events (
	seq INTEGER PRIMARY KEY AUTOINCREMENT,
	rollout_id TEXT NOT NULL,
	attempt_id TEXT NOT NULL,
	type TEXT NOT NULL,
	time INTEGER NOT NULL,
	data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS events_rollout ON events(rollout_id, seq);
CREATE TABLE IF NOT EXISTS models (
	name TEXT NOT NULL,
	version INTEGER NOT NULL,
	endpoints TEXT NOT NULL DEFAULT '[]',
	weights TEXT NOT NULL DEFAULT '',
	metadata BLOB,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (name, version)
);
`

// schema2 is what came after the first schema: the queue in claim order (a
// claim among 100k queued rollouts was a sort of all of them), a rollout's
// trainer step (an indexed column: listings filter by it), recent attempts
// by start time (the workers view), and trainer step metrics.
const schema2 = `
CREATE INDEX IF NOT EXISTS rollouts_queue ON rollouts(seq) WHERE status IN ('queuing', 'requeuing');
CREATE INDEX IF NOT EXISTS rollouts_step ON rollouts(step, seq) WHERE step IS NOT NULL;
CREATE INDEX IF NOT EXISTS attempts_started ON attempts(started_at, worker_id, status);
CREATE TABLE IF NOT EXISTS train_steps (
	run TEXT NOT NULL,
	mode TEXT NOT NULL,
	step INTEGER NOT NULL,
	time INTEGER NOT NULL,
	metrics BLOB NOT NULL,
	PRIMARY KEY (run, mode, step)
);
`

// SchemaVersion is the database's user_version this build writes: 3 stores
// model_request events in the encoded form of store/codec.go (rows of
// earlier versions stay as they are, and are read as they were).
const SchemaVersion = 3

// migrate brings a database created by an earlier version up to date: it
// adds the rollouts.step column (filled from each rollout's metadata) and
// what schema2 creates, and records SchemaVersion. A database of a newer
// version is refused.
func migrate(ctx context.Context, w *sql.DB) error {
	var v int
	if err := w.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return err
	}
	if v > SchemaVersion {
		return fmt.Errorf("database schema version %d is newer than this build's %d: use a newer agl", v, SchemaVersion)
	}
	if err := migrate2(ctx, w); err != nil {
		return err
	}
	if v < SchemaVersion {
		if _, err := w.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, SchemaVersion)); err != nil {
			return err
		}
	}
	return nil
}

func migrate2(ctx context.Context, w *sql.DB) error {
	var n int
	if err := w.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info('rollouts') WHERE name = 'step'`).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		tx, err := w.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `ALTER TABLE rollouts ADD COLUMN step INTEGER`); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT seq, metadata FROM rollouts WHERE metadata IS NOT NULL`)
		if err != nil {
			return err
		}
		steps := map[int64]int64{}
		for rows.Next() {
			var seq int64
			var meta []byte
			if err := rows.Scan(&seq, &meta); err != nil {
				rows.Close()
				return err
			}
			if st := store.StepFromMetadata(meta); st != nil {
				steps[seq] = *st
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for seq, st := range steps {
			if _, err := tx.ExecContext(ctx, `UPDATE rollouts SET step = ? WHERE seq = ?`, st, seq); err != nil {
				return err
			}
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	_, err := w.ExecContext(ctx, schema2)
	return err
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

// wtx is a write transaction whose statements are prepared once per store
// (parsing SQL was a fifth of the cost of a rollout lifecycle). A statement
// first seen inside a transaction is prepared on the transaction (the only
// writer connection is busy) and cached for later ones once it ends.
type wtx struct {
	*sql.Tx
	s       *Store
	pending *[]string
}

func (t wtx) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	t.s.mu.Lock()
	st, ok := t.s.stmts[q]
	t.s.mu.Unlock()
	if ok {
		return t.Tx.StmtContext(ctx, st), nil
	}
	*t.pending = append(*t.pending, q)
	return t.Tx.PrepareContext(ctx, q)
}

// cache prepares statements first used by a finished transaction.
func (s *Store) cache(ctx context.Context, qs []string) {
	for _, q := range qs {
		s.mu.Lock()
		_, ok := s.stmts[q]
		s.mu.Unlock()
		if ok {
			continue
		}
		st, err := s.w.PrepareContext(ctx, q)
		if err != nil {
			continue // the next transaction prepares it again
		}
		s.mu.Lock()
		if _, dup := s.stmts[q]; dup {
			st.Close()
		} else {
			s.stmts[q] = st
		}
		s.mu.Unlock()
	}
}

func (t wtx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	st, err := t.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

func (t wtx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	st, err := t.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// QueryRowContext reports a prepare error through Row.Scan, like sql.Tx.
func (t wtx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	st, err := t.stmt(ctx, q)
	if err != nil {
		return t.Tx.QueryRowContext(ctx, q, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

func ts(t time.Time) int64 { return t.UnixNano() }

func fromTS(n int64) time.Time { return time.Unix(0, n).UTC() }

func now() time.Time { return time.Now().UTC() }

func (s *Store) tx(ctx context.Context, fn func(tx wtx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite store: begin: %w", err)
	}
	var pending []string
	err = fn(wtx{tx, s, &pending})
	if err != nil {
		tx.Rollback()
	} else if err = tx.Commit(); err != nil {
		err = fmt.Errorf("sqlite store: commit: %w", err)
	} else {
		s.committed()
	}
	if len(pending) > 0 {
		s.cache(ctx, pending)
	}
	return err
}

// endingTx runs a transaction that may end attempts: no event is
// journaled meanwhile, and what was journaled before is applied first
// (see journal.go).
func (s *Store) endingTx(ctx context.Context, fn func(tx wtx) error) error {
	if s.journal == nil {
		return s.tx(ctx, fn)
	}
	return s.journal.exclusive(ctx, func() error { return s.tx(ctx, fn) })
}

const rolloutCols = `seq, id, group_id, task, mode, metadata, timeout_s, max_attempts, unresponsive_s,
	status, num_attempts, error, reward, reward_data, created_at, updated_at, terminal_seq, step`

type scanner interface{ Scan(dest ...any) error }

func scanRollout(sc scanner) (store.Rollout, error) {
	var r store.Rollout
	var task, meta, rdata []byte
	var reward sql.NullFloat64
	var created, updated int64
	var term, step sql.NullInt64
	var mode, status string
	err := sc.Scan(&r.Seq, &r.ID, &r.GroupID, &task, &mode, &meta, &r.Config.TimeoutSeconds,
		&r.Config.MaxAttempts, &r.Config.UnresponsiveSeconds, &status, &r.NumAttempts, &r.Error,
		&reward, &rdata, &created, &updated, &term, &step)
	if err != nil {
		return r, err
	}
	r.Task = json.RawMessage(task)
	if len(meta) > 0 {
		r.Metadata = json.RawMessage(meta)
	}
	if len(rdata) > 0 {
		r.RewardData = json.RawMessage(rdata)
	}
	if reward.Valid {
		v := reward.Float64
		r.Reward = &v
	}
	r.Mode = store.Mode(mode)
	r.Status = store.RolloutStatus(status)
	r.CreatedAt, r.UpdatedAt = fromTS(created), fromTS(updated)
	r.TerminalSeq = term.Int64
	if step.Valid {
		v := step.Int64
		r.Step = &v
	}
	return r, nil
}

const attemptCols = `id, rollout_id, number, worker_id, status, started_at, last_heartbeat, ended_at, error`

func scanAttempt(sc scanner) (store.Attempt, error) {
	var a store.Attempt
	var st string
	var started, hb int64
	var ended sql.NullInt64
	if err := sc.Scan(&a.ID, &a.RolloutID, &a.Number, &a.WorkerID, &st, &started, &hb, &ended, &a.Error); err != nil {
		return a, err
	}
	a.Status = store.AttemptStatus(st)
	a.StartedAt, a.LastHeartbeat = fromTS(started), fromTS(hb)
	if ended.Valid {
		t := fromTS(ended.Int64)
		a.EndedAt = &t
	}
	return a, nil
}

type querier interface {
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

func getRollout(ctx context.Context, q querier, id string) (store.Rollout, error) {
	r, err := scanRollout(q.QueryRowContext(ctx, `SELECT `+rolloutCols+` FROM rollouts WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return r, store.Errorf(store.ErrNotFound, "rollout %q", id)
	}
	if err != nil {
		return r, fmt.Errorf("sqlite store: get rollout %s: %w", id, err)
	}
	return r, nil
}

func getAttempt(ctx context.Context, q querier, rolloutID, attemptID string) (store.Attempt, error) {
	a, err := scanAttempt(q.QueryRowContext(ctx, `SELECT `+attemptCols+` FROM attempts WHERE id = ? AND rollout_id = ?`, attemptID, rolloutID))
	if errors.Is(err, sql.ErrNoRows) {
		return a, store.Errorf(store.ErrNotFound, "attempt %q of rollout %q", attemptID, rolloutID)
	}
	if err != nil {
		return a, fmt.Errorf("sqlite store: get attempt %s: %w", attemptID, err)
	}
	return a, nil
}

// CreateRollouts implements store.Store.
func (s *Store) CreateRollouts(ctx context.Context, in []store.NewRollout) ([]store.Rollout, error) {
	norm := make([]store.NewRollout, len(in))
	for i, n := range in {
		var err error
		if norm[i], err = n.Normalize(); err != nil {
			return nil, err
		}
	}
	out := make([]store.Rollout, len(norm))
	err := s.tx(ctx, func(tx wtx) error {
		ins, err := tx.stmt(ctx, `INSERT INTO rollouts (id, group_id, task, mode, metadata, timeout_s, max_attempts,
			unresponsive_s, status, created_at, updated_at, step) VALUES (?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(id) DO NOTHING`)
		if err != nil {
			return fmt.Errorf("sqlite store: prepare: %w", err)
		}
		t := ts(now())
		for i, n := range norm {
			var meta any
			if len(n.Metadata) > 0 {
				meta = []byte(n.Metadata)
			}
			var step any
			if n.Step != nil {
				step = *n.Step
			}
			if _, err := ins.ExecContext(ctx, n.ID, n.GroupID, []byte(n.Task), string(n.Mode), meta, n.Config.TimeoutSeconds,
				n.Config.MaxAttempts, n.Config.UnresponsiveSeconds, string(store.RolloutQueuing), t, t, step); err != nil {
				return fmt.Errorf("sqlite store: insert rollout %s: %w", n.ID, err)
			}
			if out[i], err = getRollout(ctx, tx, n.ID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetRollout implements store.Store.
func (s *Store) GetRollout(ctx context.Context, id string) (store.Rollout, error) {
	r, err := getRollout(ctx, s.r, id)
	if err != nil {
		return r, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT `+attemptCols+` FROM attempts WHERE rollout_id = ? ORDER BY number`, id)
	if err != nil {
		return r, fmt.Errorf("sqlite store: list attempts of %s: %w", id, err)
	}
	defer rows.Close()
	for rows.Next() {
		a, err := scanAttempt(rows)
		if err != nil {
			return r, fmt.Errorf("sqlite store: scan attempt: %w", err)
		}
		r.Attempts = append(r.Attempts, a)
	}
	return r, rows.Err()
}

// ListRollouts implements store.Store.
func (s *Store) ListRollouts(ctx context.Context, f store.RolloutFilter) ([]store.Rollout, int64, error) {
	where, args := []string{}, []any{}
	if len(f.Status) > 0 {
		ph := make([]string, len(f.Status))
		for i, st := range f.Status {
			ph[i] = "?"
			args = append(args, string(st))
		}
		where = append(where, "status IN ("+strings.Join(ph, ",")+")")
	}
	if f.GroupID != "" {
		where = append(where, "group_id = ?")
		args = append(args, f.GroupID)
	}
	if f.Mode != "" {
		where = append(where, "mode = ?")
		args = append(args, string(f.Mode))
	}
	if f.Step != nil {
		where = append(where, "step = ?")
		args = append(args, *f.Step)
	}
	if f.MinReward != nil {
		where = append(where, "reward >= ?")
		args = append(args, *f.MinReward)
	}
	if f.MaxReward != nil {
		where = append(where, "reward <= ?")
		args = append(args, *f.MaxReward)
	}
	order := "ASC"
	if f.Desc {
		order = "DESC"
		if f.Cursor > 0 {
			where = append(where, "seq < ?")
			args = append(args, f.Cursor)
		}
	} else if f.Cursor > 0 {
		where = append(where, "seq > ?")
		args = append(args, f.Cursor)
	}
	limit := store.PageLimit(f.Limit)
	q := `SELECT ` + rolloutCols + ` FROM rollouts`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += fmt.Sprintf(" ORDER BY seq %s LIMIT %d", order, limit+1)
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, 0, fmt.Errorf("sqlite store: list rollouts: %w", err)
	}
	defer rows.Close()
	var out []store.Rollout
	for rows.Next() {
		r, err := scanRollout(rows)
		if err != nil {
			return nil, 0, fmt.Errorf("sqlite store: scan rollout: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("sqlite store: list rollouts: %w", err)
	}
	var next int64
	if len(out) > limit {
		out = out[:limit]
		next = out[limit-1].Seq
	}
	return out, next, nil
}

// CountRollouts implements store.Store.
func (s *Store) CountRollouts(ctx context.Context) (store.Counts, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT status, COUNT(*) FROM rollouts GROUP BY status`)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: count rollouts: %w", err)
	}
	defer rows.Close()
	c := store.Counts{}
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return nil, fmt.Errorf("sqlite store: count rollouts: %w", err)
		}
		c[store.RolloutStatus(st)] = n
	}
	return c, rows.Err()
}

// nextTerminalSeq is safe because all writes are serialized on one
// connection. The IS NOT NULL lets SQLite read the maximum from the partial
// index rollouts_terminal instead of scanning the table.
func nextTerminalSeq(ctx context.Context, tx wtx) (int64, error) {
	var n int64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(terminal_seq), 0) + 1 FROM rollouts WHERE terminal_seq IS NOT NULL`).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite store: terminal seq: %w", err)
	}
	return n, nil
}

// setRolloutStatus moves a rollout to st (assigning a terminal seq when st is
// terminal) and returns it as stored.
func setRolloutStatus(ctx context.Context, tx wtx, r store.Rollout, st store.RolloutStatus, errMsg string, t time.Time) (store.Rollout, error) {
	var term any
	if st.Terminal() {
		n, err := nextTerminalSeq(ctx, tx)
		if err != nil {
			return r, err
		}
		term = n
	}
	if _, err := tx.ExecContext(ctx, `UPDATE rollouts SET status = ?, error = ?, updated_at = ?, terminal_seq = ? WHERE id = ?`,
		string(st), errMsg, ts(t), term, r.ID); err != nil {
		return r, fmt.Errorf("sqlite store: update rollout %s: %w", r.ID, err)
	}
	return getRollout(ctx, tx, r.ID)
}

func endAttempt(ctx context.Context, tx wtx, a store.Attempt, st store.AttemptStatus, errMsg string, t time.Time) error {
	if _, err := tx.ExecContext(ctx, `UPDATE attempts SET status = ?, error = ?, ended_at = ? WHERE id = ?`,
		string(st), errMsg, ts(t), a.ID); err != nil {
		return fmt.Errorf("sqlite store: end attempt %s: %w", a.ID, err)
	}
	return nil
}

func runningAttempt(ctx context.Context, q querier, rolloutID string) (store.Attempt, bool, error) {
	a, err := scanAttempt(q.QueryRowContext(ctx, `SELECT `+attemptCols+` FROM attempts WHERE rollout_id = ? AND status = 'running'`, rolloutID))
	if errors.Is(err, sql.ErrNoRows) {
		return a, false, nil
	}
	if err != nil {
		return a, false, fmt.Errorf("sqlite store: running attempt of %s: %w", rolloutID, err)
	}
	return a, true, nil
}

// CancelRollout implements store.Store.
func (s *Store) CancelRollout(ctx context.Context, id, reason string) (store.Rollout, error) {
	var out store.Rollout
	err := s.endingTx(ctx, func(tx wtx) error {
		r, err := getRollout(ctx, tx, id)
		if err != nil {
			return err
		}
		if r.Status.Terminal() {
			return store.Errorf(store.ErrConflict, "rollout %s is already %s", id, r.Status)
		}
		t := now()
		msg := "cancelled"
		if reason != "" {
			msg += ": " + reason
		}
		if a, ok, err := runningAttempt(ctx, tx, id); err != nil {
			return err
		} else if ok {
			if err := endAttempt(ctx, tx, a, store.AttemptFailed, msg, t); err != nil {
				return err
			}
		}
		out, err = setRolloutStatus(ctx, tx, r, store.RolloutCancelled, msg, t)
		return err
	})
	return out, err
}

// Claim implements store.Store.
func (s *Store) Claim(ctx context.Context, req store.ClaimRequest) (store.Claim, error) {
	if req.Mode != "" && !req.Mode.Valid() {
		return store.Claim{}, store.Errorf(store.ErrInvalid, "mode %q is not one of train, val", req.Mode)
	}
	var c store.Claim
	err := s.tx(ctx, func(tx wtx) error {
		// The partial index walks the queue in seq order; without it SQLite
		// sorted every queued rollout for each claim.
		q := `SELECT ` + rolloutCols + ` FROM rollouts INDEXED BY rollouts_queue WHERE status IN ('queuing', 'requeuing')`
		args := []any{}
		if req.Mode != "" {
			q += ` AND mode = ?`
			args = append(args, string(req.Mode))
		}
		q += ` ORDER BY seq LIMIT 1`
		r, err := scanRollout(tx.QueryRowContext(ctx, q, args...))
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNoneQueued
		}
		if err != nil {
			return fmt.Errorf("sqlite store: claim: %w", err)
		}
		t := now()
		key, hash := store.NewKey()
		a := store.Attempt{ID: store.NewID("at_"), RolloutID: r.ID, Number: r.NumAttempts + 1, WorkerID: req.WorkerID,
			Status: store.AttemptRunning, StartedAt: t, LastHeartbeat: t}
		if _, err := tx.ExecContext(ctx, `INSERT INTO attempts (id, rollout_id, number, worker_id, status, key_hash, started_at, last_heartbeat)
			VALUES (?,?,?,?,?,?,?,?)`, a.ID, a.RolloutID, a.Number, a.WorkerID, string(a.Status), hash, ts(t), ts(t)); err != nil {
			return fmt.Errorf("sqlite store: insert attempt: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE rollouts SET status = 'running', num_attempts = ?, updated_at = ? WHERE id = ?`,
			a.Number, ts(t), r.ID); err != nil {
			return fmt.Errorf("sqlite store: claim rollout %s: %w", r.ID, err)
		}
		r.Status, r.NumAttempts, r.UpdatedAt = store.RolloutRunning, a.Number, t
		// fromTS round trip so the returned times equal what a read returns.
		a.StartedAt, a.LastHeartbeat = fromTS(ts(t)), fromTS(ts(t))
		r.UpdatedAt = a.StartedAt
		c = store.Claim{Rollout: r, Attempt: a, Key: key}
		return nil
	})
	return c, err
}

// Heartbeat implements store.Store.
func (s *Store) Heartbeat(ctx context.Context, rolloutID, attemptID string) (store.Attempt, error) {
	var a store.Attempt
	err := s.tx(ctx, func(tx wtx) error {
		var err error
		if a, err = getAttempt(ctx, tx, rolloutID, attemptID); err != nil {
			return err
		}
		if a.Status != store.AttemptRunning {
			return store.Errorf(store.ErrConflict, "attempt %s is %s, not running", attemptID, a.Status)
		}
		t := now()
		if _, err := tx.ExecContext(ctx, `UPDATE attempts SET last_heartbeat = ? WHERE id = ?`, ts(t), attemptID); err != nil {
			return fmt.Errorf("sqlite store: heartbeat %s: %w", attemptID, err)
		}
		a.LastHeartbeat = fromTS(ts(t))
		return nil
	})
	return a, err
}

// CompleteAttempt implements store.Store.
func (s *Store) CompleteAttempt(ctx context.Context, rolloutID, attemptID string, st store.AttemptStatus, errMsg string) (store.Rollout, error) {
	if st != store.AttemptSucceeded && st != store.AttemptFailed {
		return store.Rollout{}, store.Errorf(store.ErrInvalid, "status %q: an attempt completes as succeeded or failed", st)
	}
	var out store.Rollout
	err := s.endingTx(ctx, func(tx wtx) error {
		a, err := getAttempt(ctx, tx, rolloutID, attemptID)
		if err != nil {
			return err
		}
		if a.Status != store.AttemptRunning {
			return store.Errorf(store.ErrConflict, "attempt %s is %s, not running", attemptID, a.Status)
		}
		r, err := getRollout(ctx, tx, rolloutID)
		if err != nil {
			return err
		}
		t := now()
		if err := endAttempt(ctx, tx, a, st, errMsg, t); err != nil {
			return err
		}
		if err := setReward(ctx, tx, rolloutID, attemptID); err != nil {
			return err
		}
		next, msg := store.AttemptOutcome(r, st, errMsg)
		out, err = setRolloutStatus(ctx, tx, r, next, msg, t)
		return err
	})
	if err == nil {
		s.bases.Forget(rolloutID, attemptID) // no call of it will be stored again
	}
	return out, err
}

// setReward stores the attempt's reward summary on its rollout.
func setReward(ctx context.Context, tx wtx, rolloutID, attemptID string) error {
	rows, err := tx.QueryContext(ctx, `SELECT data FROM events WHERE rollout_id = ? AND attempt_id = ? AND type = 'reward' ORDER BY seq DESC`,
		rolloutID, attemptID)
	if err != nil {
		return fmt.Errorf("sqlite store: read rewards: %w", err)
	}
	var datas []json.RawMessage
	for rows.Next() {
		var d []byte
		if err := rows.Scan(&d); err != nil {
			rows.Close()
			return fmt.Errorf("sqlite store: read rewards: %w", err)
		}
		datas = append(datas, d)
	}
	rows.Close()
	var reward, data any
	if v, d, ok := api.RewardSummary(datas); ok {
		reward, data = v, []byte(d)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE rollouts SET reward = ?, reward_data = ? WHERE id = ?`, reward, data, rolloutID); err != nil {
		return fmt.Errorf("sqlite store: set reward: %w", err)
	}
	return nil
}

// AttemptByKey implements store.Store.
func (s *Store) AttemptByKey(ctx context.Context, rolloutID, attemptID, key string) (store.Attempt, error) {
	row := s.r.QueryRowContext(ctx, `SELECT key_hash, `+attemptCols+` FROM attempts WHERE id = ? AND rollout_id = ?`, attemptID, rolloutID)
	var hash []byte
	var a store.Attempt
	var st string
	var started, hb int64
	var ended sql.NullInt64
	err := row.Scan(&hash, &a.ID, &a.RolloutID, &a.Number, &a.WorkerID, &st, &started, &hb, &ended, &a.Error)
	if errors.Is(err, sql.ErrNoRows) {
		// Same answer as a wrong key: ids are not secrets, but don't help probing.
		store.KeyMatches(key, make([]byte, 32))
		return a, store.Errorf(store.ErrForbidden, "key does not grant rollout %q attempt %q", rolloutID, attemptID)
	}
	if err != nil {
		return a, fmt.Errorf("sqlite store: attempt by key: %w", err)
	}
	if !store.KeyMatches(key, hash) {
		return store.Attempt{}, store.Errorf(store.ErrForbidden, "key does not grant rollout %q attempt %q", rolloutID, attemptID)
	}
	a.Status = store.AttemptStatus(st)
	a.StartedAt, a.LastHeartbeat = fromTS(started), fromTS(hb)
	if ended.Valid {
		t := fromTS(ended.Int64)
		a.EndedAt = &t
	}
	return a, nil
}

// AppendEvents implements store.Store. Concurrent calls share write
// transactions (store.GroupCommit): each returns once the transaction
// holding its events committed.
func (s *Store) AppendEvents(ctx context.Context, rolloutID, attemptID string, in []store.NewEvent) ([]store.Event, error) {
	evs, err := store.ValidateEvents(in, now())
	if err != nil {
		return nil, err
	}
	if s.journal != nil {
		// Events journaled before this call come first.
		if err := s.journal.flush(ctx); err != nil {
			return nil, err
		}
	}
	return s.events.Append(ctx, rolloutID, attemptID, evs)
}

// RecordEvents implements store.EventRecorder: the events are durable
// once written to the event journal (see journal.go), and copied into
// SQLite in the background; without a journal (synchronous=FULL) it is
// AppendEvents.
func (s *Store) RecordEvents(ctx context.Context, rolloutID, attemptID string, in []store.NewEvent) error {
	if s.journal != nil && len(in) > 0 {
		evs, err := store.ValidateEvents(in, now())
		if err != nil {
			return err
		}
		if err := s.journal.record(ctx, rolloutID, attemptID, evs); !errors.Is(err, errJournalOff) {
			return err
		}
	}
	_, err := s.AppendEvents(ctx, rolloutID, attemptID, in)
	return err
}

// commitEvents is the store.CommitFunc of s.events: one write transaction
// for a batch of appends.
func (s *Store) commitEvents(ctx context.Context, batch []*store.Append) error {
	var enc *store.EncodeBatch
	err := s.tx(ctx, func(tx wtx) error {
		enc = s.bases.BatchFrom(baseSource{ctx, s.r})
		check, err := tx.stmt(ctx, `SELECT status FROM attempts WHERE id = ? AND rollout_id = ?`)
		if err != nil {
			return fmt.Errorf("sqlite store: prepare: %w", err)
		}
		ins, err := tx.stmt(ctx, `INSERT INTO events (rollout_id, attempt_id, type, time, data) VALUES (?,?,?,?,?)`)
		if err != nil {
			return fmt.Errorf("sqlite store: prepare: %w", err)
		}
		// An attempt's status cannot change inside this transaction: look
		// each attempt up once per batch.
		type seen struct{ rid, aid, status string }
		var known []seen
		for _, a := range batch {
			st, found := "", false
			for _, k := range known {
				if k.rid == a.RolloutID && k.aid == a.AttemptID {
					st, found = k.status, true
					break
				}
			}
			if !found {
				err := check.QueryRowContext(ctx, a.AttemptID, a.RolloutID).Scan(&st)
				if errors.Is(err, sql.ErrNoRows) {
					st = ""
				} else if err != nil {
					return fmt.Errorf("sqlite store: append events: %w", err)
				}
				known = append(known, seen{a.RolloutID, a.AttemptID, st})
			}
			switch st {
			case "":
				a.Err = store.Errorf(store.ErrNotFound, "attempt %q of rollout %q", a.AttemptID, a.RolloutID)
				continue
			case string(store.AttemptRunning):
			default:
				a.Err = store.Errorf(store.ErrConflict, "attempt %s is %s, not running: events are closed", a.AttemptID, st)
				continue
			}
			out := make([]store.Event, len(a.Events))
			for j, e := range a.Events {
				seq, err := s.insertEvent(ctx, ins, enc, a.RolloutID, a.AttemptID, e)
				if err != nil {
					return err
				}
				out[j] = store.Event{Seq: seq, RolloutID: a.RolloutID, AttemptID: a.AttemptID, Type: e.Type, Time: fromTS(ts(e.Time)), Data: e.Data}
			}
			a.Stored = out
		}
		return nil
	})
	if err == nil {
		enc.Commit()
	}
	return err
}

// insertEvent inserts one event in its stored form (store/codec.go) and
// returns its sequence number. An event already in the stored form (one
// replayed from the journal) is inserted as is.
func (s *Store) insertEvent(ctx context.Context, ins *sql.Stmt, enc *store.EncodeBatch, rid, aid string, e store.NewEvent) (int64, error) {
	en := store.Encoding{Data: e.Data}
	if !s.plain && !store.Encoded(e.Data) {
		en = enc.Encode(rid, aid, e)
	}
	return s.insertEncoded(ctx, ins, enc, rid, aid, e, en)
}

// insertEncoded inserts event e stored as en.
func (s *Store) insertEncoded(ctx context.Context, ins *sql.Stmt, enc *store.EncodeBatch, rid, aid string, e store.NewEvent, en store.Encoding) (int64, error) {
	res, err := ins.ExecContext(ctx, rid, aid, e.Type, ts(e.Time), en.Data)
	if err != nil {
		return 0, fmt.Errorf("sqlite store: insert event: %w", err)
	}
	seq, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("sqlite store: event seq: %w", err)
	}
	enc.Stored(rid, aid, en, seq)
	return seq, nil
}

// baseSource reads the bases of calls not cached (store.BaseSource) from
// committed events.
type baseSource struct {
	ctx context.Context
	db  *sql.DB
}

func (b baseSource) RecentCalls(rid, aid string, n int) ([]store.Event, error) {
	rows, err := b.db.QueryContext(b.ctx, `SELECT seq, data FROM events WHERE rollout_id = ? AND attempt_id = ? AND type = ? ORDER BY seq DESC LIMIT ?`,
		rid, aid, store.EventModelRequest, n)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: recent calls: %w", err)
	}
	defer rows.Close()
	var out []store.Event
	for rows.Next() {
		var e store.Event
		var d []byte
		if err := rows.Scan(&e.Seq, &d); err != nil {
			return nil, fmt.Errorf("sqlite store: recent calls: %w", err)
		}
		e.Data = d
		out = append(out, e)
	}
	return out, rows.Err()
}

func (b baseSource) EventData(seq int64) ([]byte, error) {
	var d []byte
	err := b.db.QueryRowContext(b.ctx, `SELECT data FROM events WHERE seq = ?`, seq).Scan(&d)
	return d, err
}

// ListEvents implements store.Store.
func (s *Store) ListEvents(ctx context.Context, f store.EventFilter) ([]store.Event, error) {
	if s.journal != nil {
		if err := s.journal.flush(ctx); err != nil {
			return nil, err
		}
	}
	q := `SELECT seq, rollout_id, attempt_id, type, time, data FROM events WHERE rollout_id = ? AND seq > ?`
	args := []any{f.RolloutID, f.AfterSeq}
	if f.AttemptID != "" {
		q += ` AND attempt_id = ?`
		args = append(args, f.AttemptID)
	}
	if len(f.Types) > 0 {
		ph := make([]string, len(f.Types))
		for i, t := range f.Types {
			ph[i] = "?"
			args = append(args, t)
		}
		q += ` AND type IN (` + strings.Join(ph, ",") + `)`
	}
	q += ` ORDER BY seq`
	if f.Desc {
		q += ` DESC`
	}
	if f.Limit > 0 {
		q += fmt.Sprintf(` LIMIT %d`, f.Limit)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: list events: %w", err)
	}
	defer rows.Close()
	out := []store.Event{}
	for rows.Next() {
		var e store.Event
		var t int64
		var d []byte
		if err := rows.Scan(&e.Seq, &e.RolloutID, &e.AttemptID, &e.Type, &t, &d); err != nil {
			return nil, fmt.Errorf("sqlite store: scan event: %w", err)
		}
		e.Time, e.Data = fromTS(t), json.RawMessage(d)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite store: list events: %w", err)
	}
	if f.Desc {
		slices.Reverse(out) // bases decode oldest first
	}
	err = s.bases.DecodeEvents(out, baseSource{ctx, s.r}.EventData)
	if f.Desc {
		slices.Reverse(out)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite store: list events of rollout %s: %w", f.RolloutID, err)
	}
	if len(out) == 0 {
		if _, err := getRollout(ctx, s.r, f.RolloutID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Terminal implements store.Store.
func (s *Store) Terminal(ctx context.Context, after int64, limit int) ([]store.Rollout, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+rolloutCols+` FROM rollouts WHERE terminal_seq > ? ORDER BY terminal_seq LIMIT ?`,
		after, store.PageLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("sqlite store: terminal: %w", err)
	}
	defer rows.Close()
	out := []store.Rollout{}
	for rows.Next() {
		r, err := scanRollout(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite store: scan rollout: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// RegisterModel implements store.Store.
func (s *Store) RegisterModel(ctx context.Context, m store.Model) (store.Model, error) {
	if err := m.Validate(); err != nil {
		return m, err
	}
	err := s.tx(ctx, func(tx wtx) error {
		var last int64
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM models WHERE name = ?`, m.Name).Scan(&last); err != nil {
			return fmt.Errorf("sqlite store: model version: %w", err)
		}
		if m.Version == 0 {
			v, err := store.NextModelVersion(m.Name, last)
			if err != nil {
				return err
			}
			m.Version = v
		} else if m.Version <= last {
			return store.Errorf(store.ErrConflict, "model %s version %d is not above the latest %d", m.Name, m.Version, last)
		}
		m.CreatedAt = fromTS(ts(now()))
		eps, _ := json.Marshal(m.Endpoints)
		var meta any
		if len(m.Metadata) > 0 {
			meta = []byte(m.Metadata)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO models (name, version, endpoints, weights, metadata, created_at) VALUES (?,?,?,?,?,?)`,
			m.Name, m.Version, string(eps), m.Weights, meta, ts(m.CreatedAt)); err != nil {
			return fmt.Errorf("sqlite store: insert model: %w", err)
		}
		return nil
	})
	return m, err
}

// ListModels implements store.Store.
func (s *Store) ListModels(ctx context.Context, name string) ([]store.Model, error) {
	q := `SELECT name, version, endpoints, weights, metadata, created_at FROM models`
	args := []any{}
	if name != "" {
		q += ` WHERE name = ?`
		args = append(args, name)
	}
	q += ` ORDER BY created_at DESC, name, version DESC`
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: list models: %w", err)
	}
	defer rows.Close()
	out := []store.Model{}
	for rows.Next() {
		var m store.Model
		var eps string
		var meta []byte
		var created int64
		if err := rows.Scan(&m.Name, &m.Version, &eps, &m.Weights, &meta, &created); err != nil {
			return nil, fmt.Errorf("sqlite store: scan model: %w", err)
		}
		if err := json.Unmarshal([]byte(eps), &m.Endpoints); err != nil {
			return nil, fmt.Errorf("sqlite store: model endpoints: %w", err)
		}
		if len(meta) > 0 {
			m.Metadata = meta
		}
		m.CreatedAt = fromTS(created)
		out = append(out, m)
	}
	return out, rows.Err()
}

// PutTrainStep implements store.Store.
func (s *Store) PutTrainStep(ctx context.Context, t store.TrainStep) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if t.Time.IsZero() {
		t.Time = now()
	}
	return s.tx(ctx, func(tx wtx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO train_steps (run, mode, step, time, metrics) VALUES (?,?,?,?,?)
			ON CONFLICT (run, mode, step) DO UPDATE SET time = excluded.time, metrics = excluded.metrics`,
			t.Run, string(t.Mode), t.Step, ts(t.Time), []byte(t.Metrics)); err != nil {
			return fmt.Errorf("sqlite store: put train step: %w", err)
		}
		return nil
	})
}

// ListTrainSteps implements store.Store.
func (s *Store) ListTrainSteps(ctx context.Context, run string) ([]store.TrainStep, error) {
	q := `SELECT run, mode, step, time, metrics FROM train_steps`
	args := []any{}
	if run != "" {
		q += ` WHERE run = ?`
		args = append(args, run)
	}
	q += ` ORDER BY run, mode, step`
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: list train steps: %w", err)
	}
	defer rows.Close()
	out := []store.TrainStep{}
	for rows.Next() {
		var t store.TrainStep
		var mode string
		var tm int64
		var m []byte
		if err := rows.Scan(&t.Run, &mode, &t.Step, &tm, &m); err != nil {
			return nil, fmt.Errorf("sqlite store: scan train step: %w", err)
		}
		t.Mode, t.Time, t.Metrics = store.Mode(mode), fromTS(tm), json.RawMessage(m)
		out = append(out, t)
	}
	return out, rows.Err()
}

// Workers implements store.Store. Two reads: recent attempts from the
// covering index attempts_started, and running ones (few) for heartbeats.
func (s *Store) Workers(ctx context.Context, since time.Time) ([]store.Worker, error) {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true}) // one snapshot
	if err != nil {
		return nil, fmt.Errorf("sqlite store: workers: %w", err)
	}
	defer tx.Rollback()
	byID := map[string]*store.Worker{}
	get := func(id string) *store.Worker {
		w := byID[id]
		if w == nil {
			w = &store.Worker{ID: id}
			byID[id] = w
		}
		return w
	}
	rows, err := tx.QueryContext(ctx, `SELECT worker_id, COUNT(*), SUM(status NOT IN ('running', 'succeeded')), MAX(started_at)
		FROM attempts WHERE started_at >= ? GROUP BY worker_id`, ts(since))
	if err != nil {
		return nil, fmt.Errorf("sqlite store: workers: %w", err)
	}
	for rows.Next() {
		var id string
		var n, failed int
		var last int64
		if err := rows.Scan(&id, &n, &failed, &last); err != nil {
			rows.Close()
			return nil, fmt.Errorf("sqlite store: workers: %w", err)
		}
		w := get(id)
		w.Attempts, w.Failed, w.LastSeen = n, failed, fromTS(last)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite store: workers: %w", err)
	}
	rows, err = tx.QueryContext(ctx, `SELECT worker_id, COUNT(*), SUM(started_at < ?), MAX(last_heartbeat)
		FROM attempts WHERE status = 'running' GROUP BY worker_id`, ts(since))
	if err != nil {
		return nil, fmt.Errorf("sqlite store: workers: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var n, older int
		var hb int64
		if err := rows.Scan(&id, &n, &older, &hb); err != nil {
			return nil, fmt.Errorf("sqlite store: workers: %w", err)
		}
		w := get(id)
		w.Running, w.Attempts = n, w.Attempts+older
		if t := fromTS(hb); t.After(w.LastSeen) {
			w.LastSeen = t
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite store: workers: %w", err)
	}
	return store.SortWorkers(byID), nil
}

// Reap implements store.Store.
func (s *Store) Reap(ctx context.Context, at time.Time) (store.ReapResult, error) {
	var res store.ReapResult
	err := s.endingTx(ctx, func(tx wtx) error {
		rows, err := tx.QueryContext(ctx, `SELECT `+attemptCols+` FROM attempts WHERE status = 'running'`)
		if err != nil {
			return fmt.Errorf("sqlite store: reap: %w", err)
		}
		var running []store.Attempt
		for rows.Next() {
			a, err := scanAttempt(rows)
			if err != nil {
				rows.Close()
				return fmt.Errorf("sqlite store: reap: %w", err)
			}
			running = append(running, a)
		}
		rows.Close()
		for _, a := range running {
			r, err := getRollout(ctx, tx, a.RolloutID)
			if err != nil {
				return err
			}
			st, msg, stale := store.Staleness(r, a, at)
			if !stale {
				continue
			}
			if err := endAttempt(ctx, tx, a, st, msg, at); err != nil {
				return err
			}
			next, rmsg := store.AttemptOutcome(r, st, msg)
			if _, err := setRolloutStatus(ctx, tx, r, next, rmsg, at); err != nil {
				return err
			}
			res.Count(st, next)
		}
		return nil
	})
	return res, err
}

// Package postgres implements store.Store on PostgreSQL (jackc/pgx v5).
//
// Open takes a postgres:// URL; the schema is created or migrated on open.
// A search_path given in the URL (…?search_path=myschema) selects the
// schema the tables live in, and that schema is created when missing, so
// several agl deployments (or tests) can share one database.
//
// Ordering guarantees:
//   - rollouts become terminal under a lock on a counter row that is held
//     until commit, so TerminalSeq order is commit order: a reader paging
//     Terminal(after) never misses a rollout that becomes terminal later
//     with a smaller sequence number;
//   - events are appended while holding the rollout's row lock, so within
//     one rollout event sequence order is commit order too; concurrent
//     appends share transactions (store.GroupCommit, EventWriters at once),
//     each returning once its transaction committed.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aglrl/agl/store"
)

// Store is a store.Store backed by a PostgreSQL database.
type Store struct {
	pool   *pgxpool.Pool
	closed atomic.Bool
	events *store.GroupCommit // batches concurrent AppendEvents into shared transactions
	bases  *store.Bases       // what model_request events are stored against (store/codec.go)
	plain  bool               // Options.PlainEvents
	obs    store.Observer     // Options.Observer, nil for none
	chg    changes            // LISTEN side of store.Shared (notify.go)
}

// Options tune the backend.
type Options struct {
	// PlainEvents stores every event as its JSON, as stores before schema
	// version 3 did (model_request events in full, a rollout's storage
	// quadratic in its length): only to measure against. Either way rows
	// of both forms are read.
	PlainEvents bool
	// Observer, when set, hears of every successful event, reaper and
	// trainer step write.
	Observer store.Observer
}

var (
	_ store.Store  = (*Store)(nil)
	_ store.Shared = (*Store)(nil)
)

// EventWriters is how many event-append transactions run at once; more
// concurrent appends queue and share the next transaction
// (store.GroupCommit). With 32 writers of single events this appended 3–4×
// the events per second of one transaction per call, and kept the rate of
// large batches (100 events from 10 writers), which one writer alone
// halved.
const EventWriters = 4

// DefaultMaxConns is the pool size used unless the URL sets pool_max_conns.
const DefaultMaxConns = 16

// Open connects to url, creates or migrates the schema, and returns the store.
func Open(ctx context.Context, url string) (*Store, error) {
	return OpenOptions(ctx, url, Options{})
}

// OpenOptions is Open with options.
func OpenOptions(ctx context.Context, url string, opt Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse url: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = DefaultMaxConns
	}
	// Times are stored as timestamptz and always handled in UTC.
	if _, ok := cfg.ConnConfig.RuntimeParams["timezone"]; !ok {
		cfg.ConnConfig.RuntimeParams["timezone"] = "UTC"
	}
	searchPath := cfg.ConnConfig.RuntimeParams["search_path"]
	if searchPath != "" {
		// The schema must exist before a connection with that search_path
		// can create tables in it.
		if err := ensureSchema(ctx, cfg.ConnConfig.Copy(), searchPath); err != nil {
			return nil, err
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	s := &Store{pool: pool, bases: store.NewBases(store.DefaultBasesBytes), plain: opt.PlainEvents, obs: opt.Observer}
	s.events = store.NewGroupCommit(s.commitEvents, store.GroupCommitOptions{MaxInFlight: EventWriters})
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// ensureSchema creates the first schema of searchPath when it is a plain
// identifier and does not exist yet.
func ensureSchema(ctx context.Context, cc *pgx.ConnConfig, searchPath string) error {
	first := strings.TrimSpace(strings.Split(searchPath, ",")[0])
	first = strings.Trim(first, `"`)
	if first == "" || first == "$user" || first == "public" {
		return nil
	}
	delete(cc.RuntimeParams, "search_path")
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("postgres: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{first}.Sanitize()); err != nil {
		var pgErr *pgconn.PgError
		// Two concurrent opens may race on creation; the loser sees a
		// unique violation on the catalog, which means the schema exists.
		if !(errors.As(err, &pgErr) && pgErr.Code == "23505") {
			return fmt.Errorf("postgres: create schema %s: %w", first, err)
		}
	}
	return nil
}

// SchemaVersion is the version this code writes and understands.
const SchemaVersion = 4

// migrations[i] brings a database from version i to i+1.
var migrations = []string{
	`
CREATE TABLE IF NOT EXISTS counters (
	name text PRIMARY KEY,
	v    bigint NOT NULL
);
INSERT INTO counters (name, v) VALUES ('terminal', 0) ON CONFLICT DO NOTHING;

CREATE TABLE IF NOT EXISTS rollouts (
	id                   text PRIMARY KEY,
	seq                  bigserial NOT NULL UNIQUE,
	group_id             text NOT NULL DEFAULT '',
	task                 bytea NOT NULL,
	mode                 text NOT NULL,
	metadata             bytea,
	timeout_seconds      double precision NOT NULL DEFAULT 0,
	max_attempts         integer NOT NULL,
	unresponsive_seconds double precision NOT NULL DEFAULT 0,
	status               text NOT NULL,
	num_attempts         integer NOT NULL DEFAULT 0,
	error                text NOT NULL DEFAULT '',
	reward               double precision,
	reward_data          bytea,
	created_at           timestamptz NOT NULL,
	updated_at           timestamptz NOT NULL,
	terminal_seq         bigint NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS rollouts_queue ON rollouts (seq) WHERE status IN ('queuing', 'requeuing');
CREATE INDEX IF NOT EXISTS rollouts_queue_mode ON rollouts (mode, seq) WHERE status IN ('queuing', 'requeuing');
CREATE UNIQUE INDEX IF NOT EXISTS rollouts_terminal ON rollouts (terminal_seq) WHERE terminal_seq > 0;
CREATE INDEX IF NOT EXISTS rollouts_status ON rollouts (status, seq);
CREATE INDEX IF NOT EXISTS rollouts_group ON rollouts (group_id, seq);

CREATE TABLE IF NOT EXISTS attempts (
	rollout_id     text NOT NULL REFERENCES rollouts (id),
	id             text NOT NULL,
	number         integer NOT NULL,
	worker_id      text NOT NULL DEFAULT '',
	status         text NOT NULL,
	key_hash       bytea NOT NULL,
	started_at     timestamptz NOT NULL,
	last_heartbeat timestamptz NOT NULL,
	ended_at       timestamptz,
	error          text NOT NULL DEFAULT '',
	PRIMARY KEY (rollout_id, id),
	UNIQUE (rollout_id, number)
);
CREATE INDEX IF NOT EXISTS attempts_running ON attempts (started_at) WHERE status = 'running';

CREATE TABLE IF NOT EXISTS events (
	seq        bigserial PRIMARY KEY,
	rollout_id text NOT NULL,
	attempt_id text NOT NULL,
	type       text NOT NULL,
	time       timestamptz NOT NULL,
	data       bytea NOT NULL
);
CREATE INDEX IF NOT EXISTS events_rollout ON events (rollout_id, seq);

CREATE TABLE IF NOT EXISTS models (
	seq        bigserial PRIMARY KEY,
	name       text NOT NULL,
	version    bigint NOT NULL,
	endpoints  text[] NOT NULL DEFAULT '{}',
	weights    text NOT NULL DEFAULT '',
	metadata   bytea,
	created_at timestamptz NOT NULL,
	UNIQUE (name, version)
);
`,
	// 2: a rollout's trainer step (indexed: listings filter by it; filled
	// from metadata by backfillSteps), recent attempts by start time (the
	// workers view), trainer step metrics.
	`
ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS step bigint;
CREATE INDEX IF NOT EXISTS rollouts_step ON rollouts (step, seq) WHERE step IS NOT NULL;
CREATE INDEX IF NOT EXISTS attempts_started ON attempts (started_at, worker_id, status);

CREATE TABLE IF NOT EXISTS train_steps (
	run     text NOT NULL,
	mode    text NOT NULL,
	step    bigint NOT NULL,
	time    timestamptz NOT NULL,
	metrics bytea NOT NULL,
	PRIMARY KEY (run, mode, step)
);
`,
	// 3: model_request events are stored in the encoded form of
	// store/codec.go (told apart from JSON by their first byte, so rows
	// written before stay as they are and read as they did).
	`SELECT 1`,
	// 4: settings every gateway replica applies (the pause state of the
	// LLM routes) and the replicas' reports of themselves (store.Shared).
	`
CREATE TABLE IF NOT EXISTS settings (
	name       text PRIMARY KEY,
	value      bytea NOT NULL,
	version    bigint NOT NULL,
	updated_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS replicas (
	id        text PRIMARY KEY,
	paused    boolean NOT NULL,
	in_flight integer NOT NULL,
	reports   bigint NOT NULL,
	seen_at   timestamptz NOT NULL
);
`,
}

// afterMigration[v] runs in the migration transaction once the schema
// reached version v.
var afterMigration = map[int]func(context.Context, pgx.Tx) error{2: backfillSteps}

// backfillSteps sets the step column of rollouts created before it existed
// from their metadata.
func backfillSteps(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, "SELECT id, metadata FROM rollouts WHERE metadata IS NOT NULL AND step IS NULL")
	if err != nil {
		return err
	}
	var ids []string
	var steps []int64
	for rows.Next() {
		var id string
		var meta []byte
		if err := rows.Scan(&id, &meta); err != nil {
			rows.Close()
			return err
		}
		if st := store.StepFromMetadata(meta); st != nil {
			ids, steps = append(ids, id), append(steps, *st)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(ids) == 0 {
		return err
	}
	_, err = tx.Exec(ctx, `UPDATE rollouts r SET step = u.step FROM unnest($1::text[], $2::bigint[]) AS u(id, step) WHERE r.id = u.id`, ids, steps)
	return err
}

// migrationLock is the advisory lock key serialising schema migrations.
const migrationLock = 0x61676c5f6d6967 // "agl_mig"

func (s *Store) migrate(ctx context.Context) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrationLock)); err != nil {
			return fmt.Errorf("postgres: migration lock: %w", err)
		}
		if _, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS schema_version (version integer NOT NULL)"); err != nil {
			return fmt.Errorf("postgres: create schema_version: %w", err)
		}
		var v int
		err := tx.QueryRow(ctx, "SELECT version FROM schema_version").Scan(&v)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			if _, err := tx.Exec(ctx, "INSERT INTO schema_version (version) VALUES (0)"); err != nil {
				return fmt.Errorf("postgres: init schema_version: %w", err)
			}
		case err != nil:
			return fmt.Errorf("postgres: read schema_version: %w", err)
		}
		if v > SchemaVersion {
			return fmt.Errorf("postgres: database schema version %d is newer than this agl understands (%d)", v, SchemaVersion)
		}
		for ; v < SchemaVersion; v++ {
			if _, err := tx.Exec(ctx, migrations[v]); err != nil {
				return fmt.Errorf("postgres: migrate schema to version %d: %w", v+1, err)
			}
			if fn := afterMigration[v+1]; fn != nil {
				if err := fn(ctx, tx); err != nil {
					return fmt.Errorf("postgres: migrate schema to version %d: %w", v+1, err)
				}
			}
		}
		if _, err := tx.Exec(ctx, "UPDATE schema_version SET version = $1", SchemaVersion); err != nil {
			return fmt.Errorf("postgres: write schema_version: %w", err)
		}
		return nil
	})
}

// Close closes the connection pool. Later calls return store.ErrStoreClosing.
func (s *Store) Close() error {
	// Appends already queued are committed first; new ones are refused.
	s.events.Close()
	if s.closed.Swap(true) {
		return nil
	}
	s.chg.stop()
	s.pool.Close()
	return nil
}

// Pool exposes the underlying connection pool (for tests and tooling).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

func (s *Store) check() error {
	if s.closed.Load() {
		return store.ErrStoreClosing
	}
	return nil
}

// tx runs fn in a read-committed transaction, retrying it a few times on
// serialization failures and deadlocks.
func (s *Store) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	if err := s.check(); err != nil {
		return err
	}
	var err error
	for try := 0; try < 5; try++ {
		err = pgx.BeginFunc(ctx, s.pool, fn)
		if !retryable(err) {
			return err
		}
	}
	return err
}

// retry runs fn (one implicit transaction) again on serialization
// failures and deadlocks.
func (s *Store) retry(fn func() error) error {
	if err := s.check(); err != nil {
		return err
	}
	var err error
	for try := 0; try < 5; try++ {
		if err = fn(); !retryable(err) {
			return err
		}
	}
	return err
}

func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "40001" || pgErr.Code == "40P01"
	}
	return false
}

// now is the store's clock reading, at the precision PostgreSQL keeps.
func now() time.Time { return norm(time.Now()) }

// norm brings t to UTC and microsecond precision, so that what a write
// returns equals what a later read returns.
func norm(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// dbErr wraps an unexpected database error with the operation's name.
func dbErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) ||
		errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrForbidden) ||
		errors.Is(err, store.ErrNoneQueued) || errors.Is(err, store.ErrStoreClosing) {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22") {
		// Data exceptions: a value PostgreSQL cannot store (invalid UTF-8,
		// a NUL byte in text, a number out of range).
		return store.Errorf(store.ErrInvalid, "%s: %s", op, pgErr.Message)
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}

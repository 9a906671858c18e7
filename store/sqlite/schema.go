package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/aglrl/agl/store"
)

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

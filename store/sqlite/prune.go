package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"time"

	"github.com/aglrl/agl/store"
)

var _ store.Pruner = (*Store)(nil)

// pruneChunk is how many rollouts one deleting transaction takes, so that
// a large prune does not hold the writer for long.
const pruneChunk = 200

// Prune implements store.Pruner: it deletes the terminal rollouts f
// selects, with their attempts and events, then gives their pages back to
// the file system (incremental vacuum; a database created before
// auto_vacuum was set is VACUUMed once, which also sets it) and truncates
// the WAL.
func (s *Store) Prune(ctx context.Context, f store.PruneFilter) (store.PruneResult, error) {
	if !f.Set() {
		return store.PruneResult{}, store.Errorf(store.ErrInvalid, "prune: set an age, a step or a size")
	}
	if s.lock == nil {
		return store.PruneResult{}, fmt.Errorf("sqlite store: prune: the store is open read-only")
	}
	if s.journal != nil {
		if err := s.journal.flush(ctx); err != nil {
			return store.PruneResult{}, err
		}
	}
	rows, err := s.r.QueryContext(ctx, `SELECT r.id, r.status, r.step, r.updated_at, COUNT(e.seq), COALESCE(SUM(LENGTH(e.data)), 0)
		FROM rollouts r LEFT JOIN events e ON e.rollout_id = r.id
		WHERE r.terminal_seq IS NOT NULL GROUP BY r.seq ORDER BY r.terminal_seq`)
	if err != nil {
		return store.PruneResult{}, fmt.Errorf("sqlite store: prune: %w", err)
	}
	var cands []store.PrunedRollout
	for rows.Next() {
		var c store.PrunedRollout
		var step sql.NullInt64
		var ended int64
		if err := rows.Scan(&c.ID, &c.Status, &step, &ended, &c.Events, &c.Bytes); err != nil {
			rows.Close()
			return store.PruneResult{}, fmt.Errorf("sqlite store: prune: %w", err)
		}
		if step.Valid {
			c.Step = &step.Int64
		}
		c.EndedAt = fromTS(ended)
		cands = append(cands, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return store.PruneResult{}, fmt.Errorf("sqlite store: prune: %w", err)
	}
	var total int64
	if err := s.r.QueryRowContext(ctx, `SELECT COALESCE(SUM(LENGTH(data)), 0) FROM events`).Scan(&total); err != nil {
		return store.PruneResult{}, fmt.Errorf("sqlite store: prune: %w", err)
	}
	res := store.SelectPrune(f, cands, total)
	if f.DryRun {
		return res, nil
	}
	res.FileBytesBefore = s.fileBytes()
	for i := 0; i < len(res.Rollouts); i += pruneChunk {
		chunk := res.Rollouts[i:min(i+pruneChunk, len(res.Rollouts))]
		err := s.tx(ctx, func(tx wtx) error {
			for _, r := range chunk {
				// Terminal is for ever, but check it where it is deleted.
				var terminal bool
				err := tx.QueryRowContext(ctx, `SELECT terminal_seq IS NOT NULL FROM rollouts WHERE id = ?`, r.ID).Scan(&terminal)
				if err == sql.ErrNoRows || (err == nil && !terminal) {
					continue
				} else if err != nil {
					return err
				}
				for _, q := range []string{`DELETE FROM events WHERE rollout_id = ?`, `DELETE FROM attempts WHERE rollout_id = ?`, `DELETE FROM rollouts WHERE id = ?`} {
					if _, err := tx.ExecContext(ctx, q, r.ID); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			return res, fmt.Errorf("sqlite store: prune: %w", err)
		}
	}
	if err := s.reclaim(ctx); err != nil {
		return res, fmt.Errorf("sqlite store: prune: reclaim space: %w", err)
	}
	res.FileBytesAfter = s.fileBytes()
	return res, nil
}

// reclaim returns free pages to the file system and truncates the WAL. A
// database created before auto_vacuum was set (or whose incremental
// vacuum left free pages) is VACUUMed, which also applies the writer's
// auto_vacuum=INCREMENTAL to it.
func (s *Store) reclaim(ctx context.Context) error {
	var mode, free int
	if err := s.w.QueryRowContext(ctx, `PRAGMA auto_vacuum`).Scan(&mode); err != nil {
		return err
	}
	if mode == 2 {
		if _, err := s.w.ExecContext(ctx, `PRAGMA incremental_vacuum`); err != nil {
			return err
		}
	}
	if err := s.w.QueryRowContext(ctx, `PRAGMA freelist_count`).Scan(&free); err != nil {
		return err
	}
	if free > 0 {
		if _, err := s.w.ExecContext(ctx, `VACUUM`); err != nil {
			return err
		}
	}
	// The checkpoint cannot truncate while a reader holds an older
	// snapshot: try a few times.
	for i := 0; i < 20; i++ {
		var busy, logPages, done int
		if err := s.w.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &logPages, &done); err != nil {
			return err
		}
		if busy == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// fileBytes is the size of the database file and its WAL.
func (s *Store) fileBytes() int64 {
	var n int64
	for _, p := range []string{s.path, s.path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
	}
	return n
}

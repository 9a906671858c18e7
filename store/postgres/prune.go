package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aglrl/agl/store"
)

var _ store.Pruner = (*Store)(nil)

// pruneChunk is how many rollouts one deleting transaction takes.
const pruneChunk = 200

// Prune implements store.Pruner: it deletes the terminal rollouts f
// selects, with their attempts and events, then VACUUMs those tables (the
// space becomes reusable by later writes; the files do not shrink, which
// would take VACUUM FULL and an exclusive lock).
func (s *Store) Prune(ctx context.Context, f store.PruneFilter) (store.PruneResult, error) {
	if err := s.check(); err != nil {
		return store.PruneResult{}, err
	}
	if !f.Set() {
		return store.PruneResult{}, store.Errorf(store.ErrInvalid, "prune: set an age, a step or a size")
	}
	rows, err := s.pool.Query(ctx, `SELECT r.id, r.status, r.step, r.updated_at, COUNT(e.seq), COALESCE(SUM(LENGTH(e.data)), 0)::bigint
		FROM rollouts r LEFT JOIN events e ON e.rollout_id = r.id
		WHERE r.terminal_seq > 0 GROUP BY r.id ORDER BY r.terminal_seq`)
	if err != nil {
		return store.PruneResult{}, dbErr("prune", err)
	}
	cands, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.PrunedRollout, error) {
		var c store.PrunedRollout
		var status string
		var ended time.Time
		err := row.Scan(&c.ID, &status, &c.Step, &ended, &c.Events, &c.Bytes)
		c.Status, c.EndedAt = store.RolloutStatus(status), ended.UTC()
		return c, err
	})
	if err != nil {
		return store.PruneResult{}, dbErr("prune", err)
	}
	var total int64
	if err := s.pool.QueryRow(ctx, `SELECT COALESCE(SUM(LENGTH(data)), 0)::bigint FROM events`).Scan(&total); err != nil {
		return store.PruneResult{}, dbErr("prune", err)
	}
	res := store.SelectPrune(f, cands, total)
	if f.DryRun {
		return res, nil
	}
	if res.FileBytesBefore, err = s.tableBytes(ctx); err != nil {
		return res, dbErr("prune", err)
	}
	for i := 0; i < len(res.Rollouts); i += pruneChunk {
		var ids []string
		for _, r := range res.Rollouts[i:min(i+pruneChunk, len(res.Rollouts))] {
			ids = append(ids, r.ID)
		}
		err := s.tx(ctx, func(tx pgx.Tx) error {
			// Lock the rollouts (terminal is for ever, but check it where
			// they are deleted), then delete what hangs off them.
			rows, err := tx.Query(ctx, `SELECT id FROM rollouts WHERE id = ANY($1::text[]) AND terminal_seq > 0 ORDER BY id FOR UPDATE`, ids)
			if err != nil {
				return err
			}
			locked, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			for _, q := range []string{`DELETE FROM events WHERE rollout_id = ANY($1::text[])`, `DELETE FROM attempts WHERE rollout_id = ANY($1::text[])`, `DELETE FROM rollouts WHERE id = ANY($1::text[])`} {
				if _, err := tx.Exec(ctx, q, locked); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return res, dbErr("prune", err)
		}
	}
	if _, err := s.pool.Exec(ctx, `VACUUM (ANALYZE) events, attempts, rollouts`); err != nil {
		return res, dbErr("prune: vacuum", err)
	}
	if res.FileBytesAfter, err = s.tableBytes(ctx); err != nil {
		return res, dbErr("prune", err)
	}
	return res, nil
}

// tableBytes is what the events, attempts and rollouts tables take on disk
// (with their indexes and TOAST).
func (s *Store) tableBytes(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT pg_total_relation_size('events') + pg_total_relation_size('attempts') + pg_total_relation_size('rollouts')`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("table sizes: %w", err)
	}
	return n, nil
}

package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/aglrl/agl/store"
)

var _ store.LateWriter = (*Store)(nil)

// appendLateEvents is AppendLateEvents without telling the Observer.
func (s *Store) appendLateEvents(ctx context.Context, rolloutID, attemptID string, in []store.NewEvent) ([]store.Event, error) {
	if len(in) > MaxEventBatch {
		return nil, store.Errorf(store.ErrInvalid, "%d events in one batch, more than %d", len(in), MaxEventBatch)
	}
	evs, err := store.ValidateEvents(in, now())
	if err != nil {
		return nil, err
	}
	var out []store.Event
	err = s.tx(ctx, func(tx pgx.Tx) error {
		out = out[:0]
		// The rollout's row lock orders this append after concurrent ones.
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT id FROM rollouts WHERE id = $1 FOR UPDATE) r`, rolloutID).Scan(&n); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM attempts WHERE rollout_id = $1 AND id = $2`, rolloutID, attemptID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return store.Errorf(store.ErrNotFound, "attempt %q of rollout %q", attemptID, rolloutID)
		}
		for _, e := range evs {
			t := norm(e.Time)
			var seq int64
			if err := tx.QueryRow(ctx, `INSERT INTO events (rollout_id, attempt_id, type, time, data) VALUES ($1,$2,$3,$4,$5) RETURNING seq`,
				rolloutID, attemptID, e.Type, t, []byte(e.Data)).Scan(&seq); err != nil {
				return err
			}
			out = append(out, store.Event{Seq: seq, RolloutID: rolloutID, AttemptID: attemptID, Type: e.Type, Time: t, Data: e.Data})
		}
		return nil
	})
	if err != nil {
		return nil, dbErr("append late events", err)
	}
	return out, nil
}

// PurgeRollout implements store.LateWriter.
func (s *Store) PurgeRollout(ctx context.Context, id string) error {
	return dbErr("purge rollout", s.tx(ctx, func(tx pgx.Tx) error {
		for _, q := range []string{`DELETE FROM events WHERE rollout_id = $1`, `DELETE FROM attempts WHERE rollout_id = $1`, `DELETE FROM rollouts WHERE id = $1`} {
			if _, err := tx.Exec(ctx, q, id); err != nil {
				return err
			}
		}
		return nil
	}))
}

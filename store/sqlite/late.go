package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/aglrl/agl/store"
)

var _ store.LateWriter = (*Store)(nil)

// appendLateEvents is AppendLateEvents without telling the Observer.
func (s *Store) appendLateEvents(ctx context.Context, rolloutID, attemptID string, in []store.NewEvent) ([]store.Event, error) {
	evs, err := store.ValidateEvents(in, now())
	if err != nil {
		return nil, err
	}
	out := make([]store.Event, 0, len(evs))
	err = s.endingTx(ctx, func(tx wtx) error {
		var n int
		err := tx.QueryRowContext(ctx, `SELECT count(*) FROM attempts WHERE id = ? AND rollout_id = ?`, attemptID, rolloutID).Scan(&n)
		if err != nil {
			return fmt.Errorf("sqlite store: append late events: %w", err)
		}
		if n == 0 {
			return store.Errorf(store.ErrNotFound, "attempt %q of rollout %q", attemptID, rolloutID)
		}
		for _, e := range evs {
			res, err := tx.ExecContext(ctx, `INSERT INTO events (rollout_id, attempt_id, type, time, data) VALUES (?,?,?,?,?)`,
				rolloutID, attemptID, e.Type, ts(e.Time), []byte(e.Data))
			if err != nil {
				return fmt.Errorf("sqlite store: insert event: %w", err)
			}
			seq, err := res.LastInsertId()
			if err != nil {
				return fmt.Errorf("sqlite store: event seq: %w", err)
			}
			out = append(out, store.Event{Seq: seq, RolloutID: rolloutID, AttemptID: attemptID, Type: e.Type, Time: fromTS(ts(e.Time)), Data: e.Data})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// PurgeRollout implements store.LateWriter.
func (s *Store) PurgeRollout(ctx context.Context, id string) error {
	return s.endingTx(ctx, func(tx wtx) error {
		var seq int64
		err := tx.QueryRowContext(ctx, `SELECT seq FROM rollouts WHERE id = ?`, id).Scan(&seq)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("sqlite store: purge rollout: %w", err)
		}
		for _, q := range []string{`DELETE FROM events WHERE rollout_id = ?`, `DELETE FROM attempts WHERE rollout_id = ?`, `DELETE FROM rollouts WHERE id = ?`} {
			if _, err := tx.ExecContext(ctx, q, id); err != nil {
				return fmt.Errorf("sqlite store: purge rollout: %w", err)
			}
		}
		return nil
	})
}

package sqlite

import (
	"context"
	"fmt"

	"github.com/aglrl/agl/store"
)

// RevokeKey implements store.Store: the key hash becomes empty, which no
// key matches (store.KeyMatches wants a full hash).
func (s *Store) RevokeKey(ctx context.Context, rolloutID, attemptID string) error {
	return s.tx(ctx, func(tx wtx) error {
		res, err := tx.ExecContext(ctx, `UPDATE attempts SET key_hash = x'' WHERE id = ? AND rollout_id = ?`, attemptID, rolloutID)
		if err != nil {
			return fmt.Errorf("sqlite store: revoke key of %s: %w", attemptID, err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return store.Errorf(store.ErrNotFound, "attempt %s of rollout %s", attemptID, rolloutID)
		}
		return nil
	})
}

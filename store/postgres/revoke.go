package postgres

import (
	"context"

	"github.com/aglrl/agl/store"
)

// RevokeKey implements store.Store: the key hash becomes empty, which no
// key matches (store.KeyMatches wants a full hash).
func (s *Store) RevokeKey(ctx context.Context, rolloutID, attemptID string) error {
	if err := s.check(); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `UPDATE attempts SET key_hash = ''::bytea WHERE rollout_id = $1 AND id = $2`, rolloutID, attemptID)
	if err != nil {
		return dbErr("revoke key", err)
	}
	if tag.RowsAffected() == 0 {
		return store.Errorf(store.ErrNotFound, "attempt %s of rollout %s", attemptID, rolloutID)
	}
	return nil
}

package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

const attemptCols = `rollout_id, id, number, worker_id, status, started_at, last_heartbeat, ended_at, error`

func scanAttempt(row pgx.Row) (store.Attempt, error) {
	var (
		a       store.Attempt
		num     int32
		status  string
		ended   *time.Time
		started time.Time
		hb      time.Time
	)
	if err := row.Scan(&a.RolloutID, &a.ID, &num, &a.WorkerID, &status, &started, &hb, &ended, &a.Error); err != nil {
		return store.Attempt{}, err
	}
	a.Number = int(num)
	a.Status = store.AttemptStatus(status)
	a.StartedAt = started.UTC()
	a.LastHeartbeat = hb.UTC()
	if ended != nil {
		e := ended.UTC()
		a.EndedAt = &e
	}
	return a, nil
}

func listAttempts(ctx context.Context, tx pgx.Tx, rolloutID string) ([]store.Attempt, error) {
	rows, err := tx.Query(ctx, "SELECT "+attemptCols+" FROM attempts WHERE rollout_id = $1 ORDER BY number", rolloutID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Attempt
	for rows.Next() {
		a, err := scanAttempt(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// getAttempt reads one attempt; lock is "" or a locking clause.
func getAttempt(ctx context.Context, tx pgx.Tx, rolloutID, attemptID, lock string) (store.Attempt, error) {
	a, err := scanAttempt(tx.QueryRow(ctx, "SELECT "+attemptCols+
		" FROM attempts WHERE rollout_id = $1 AND id = $2 "+lock, rolloutID, attemptID))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Attempt{}, store.Errorf(store.ErrNotFound, "attempt %s of rollout %s", attemptID, rolloutID)
	}
	return a, err
}

// Claim takes the oldest queuing or requeuing rollout and starts an attempt.
func (s *Store) Claim(ctx context.Context, req store.ClaimRequest) (store.Claim, error) {
	if req.Mode != "" && !req.Mode.Valid() {
		return store.Claim{}, store.Errorf(store.ErrInvalid, "unknown mode %q", req.Mode)
	}
	var c store.Claim
	err := s.tx(ctx, func(tx pgx.Tx) error {
		t := now()
		pick := `SELECT id FROM rollouts WHERE status IN ('queuing', 'requeuing') ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED`
		args := []any{t}
		if req.Mode != "" {
			pick = `SELECT id FROM rollouts WHERE status IN ('queuing', 'requeuing') AND mode = $2 ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED`
			args = append(args, string(req.Mode))
		}
		r, err := scanRollout(tx.QueryRow(ctx, `WITH c AS (`+pick+`)
			UPDATE rollouts SET status = 'running', num_attempts = num_attempts + 1, updated_at = $1
			FROM c WHERE rollouts.id = c.id RETURNING `+qualifiedRolloutCols, args...))
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrNoneQueued
		}
		if err != nil {
			return err
		}
		key, hash := store.NewKey()
		a, err := scanAttempt(tx.QueryRow(ctx, `INSERT INTO attempts (rollout_id, id, number, worker_id,
			status, key_hash, started_at, last_heartbeat) VALUES ($1, $2, $3, $4, 'running', $5, $6, $6)
			RETURNING `+attemptCols, r.ID, store.NewID("at_"), int32(r.NumAttempts), req.WorkerID, hash, t))
		if err != nil {
			return err
		}
		c = store.Claim{Rollout: r, Attempt: a, Key: key}
		return nil
	})
	if err != nil {
		return store.Claim{}, dbErr("claim", err)
	}
	c.Rollout.Attempts = nil
	return c, nil
}

// qualifiedRolloutCols is rolloutCols prefixed by the table name, for
// statements that join another relation.
var qualifiedRolloutCols = func() string {
	out := ""
	for i, c := range splitCols(rolloutCols) {
		if i > 0 {
			out += ", "
		}
		out += "rollouts." + c
	}
	return out
}()

func splitCols(cols string) []string {
	var out []string
	cur := ""
	for _, ch := range cols {
		switch ch {
		case ',':
			out = append(out, cur)
			cur = ""
		case ' ', '\n', '\t':
		default:
			cur += string(ch)
		}
	}
	return append(out, cur)
}

// Heartbeat records that a running attempt is alive.
func (s *Store) Heartbeat(ctx context.Context, rolloutID, attemptID string) (store.Attempt, error) {
	var a store.Attempt
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var err error
		a, err = scanAttempt(tx.QueryRow(ctx, `UPDATE attempts SET last_heartbeat = $3
			WHERE rollout_id = $1 AND id = $2 AND status = 'running' RETURNING `+attemptCols,
			rolloutID, attemptID, now()))
		if errors.Is(err, pgx.ErrNoRows) {
			cur, err := getAttempt(ctx, tx, rolloutID, attemptID, "")
			if err != nil {
				return err
			}
			return store.Errorf(store.ErrConflict, "attempt %s is %s, not running", attemptID, cur.Status)
		}
		return err
	})
	if err != nil {
		return store.Attempt{}, dbErr("heartbeat", err)
	}
	return a, nil
}

// lockRunning locks the rollout row and checks that the attempt exists and
// is running.
func lockRunning(ctx context.Context, tx pgx.Tx, rolloutID, attemptID string) (store.Rollout, store.Attempt, error) {
	r, err := getRollout(ctx, tx, rolloutID, "FOR UPDATE")
	if err != nil {
		return r, store.Attempt{}, err
	}
	a, err := getAttempt(ctx, tx, rolloutID, attemptID, "")
	if err != nil {
		return r, a, err
	}
	if a.Status != store.AttemptRunning {
		return r, a, store.Errorf(store.ErrConflict, "attempt %s is %s, not running", attemptID, a.Status)
	}
	return r, a, nil
}

// CompleteAttempt ends a running attempt and moves its rollout on.
func (s *Store) CompleteAttempt(ctx context.Context, rolloutID, attemptID string, status store.AttemptStatus, errMsg string) (store.Rollout, error) {
	if status != store.AttemptSucceeded && status != store.AttemptFailed {
		return store.Rollout{}, store.Errorf(store.ErrInvalid, "final status %q must be succeeded or failed", status)
	}
	var out store.Rollout
	err := s.tx(ctx, func(tx pgx.Tx) error {
		r, _, err := lockRunning(ctx, tx, rolloutID, attemptID)
		if err != nil {
			return err
		}
		t := now()
		if _, err := tx.Exec(ctx, `UPDATE attempts SET status = $3, ended_at = $4, error = $5
			WHERE rollout_id = $1 AND id = $2`, rolloutID, attemptID, string(status), t, errMsg); err != nil {
			return err
		}
		if err := setReward(ctx, tx, rolloutID, attemptID); err != nil {
			return err
		}
		next, msg := store.AttemptOutcome(r, status, errMsg)
		out, err = setStatus(ctx, tx, rolloutID, next, msg, t)
		return err
	})
	if err != nil {
		return store.Rollout{}, dbErr("complete attempt", err)
	}
	return out, nil
}

// setReward stores the reward summary of the attempt's last final reward
// event (api.RewardSummary) on its rollout, or clears it when there is none.
func setReward(ctx context.Context, tx pgx.Tx, rolloutID, attemptID string) error {
	rows, err := tx.Query(ctx, `SELECT data FROM events WHERE rollout_id = $1 AND attempt_id = $2
		AND type = 'reward' ORDER BY seq DESC`, rolloutID, attemptID)
	if err != nil {
		return err
	}
	datas, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (json.RawMessage, error) {
		var d []byte
		err := row.Scan(&d)
		return json.RawMessage(d), err
	})
	if err != nil {
		return fmt.Errorf("read rewards: %w", err)
	}
	var (
		reward *float64
		data   []byte
	)
	if v, d, ok := api.RewardSummary(datas); ok {
		reward, data = &v, []byte(d)
	}
	_, err = tx.Exec(ctx, "UPDATE rollouts SET reward = $2, reward_data = $3 WHERE id = $1", rolloutID, reward, data)
	return err
}

// AttemptByKey returns the attempt if key is its scoped key.
func (s *Store) AttemptByKey(ctx context.Context, rolloutID, attemptID, key string) (store.Attempt, error) {
	if err := s.check(); err != nil {
		return store.Attempt{}, err
	}
	var (
		hash []byte
		a    store.Attempt
	)
	row := s.pool.QueryRow(ctx, "SELECT "+attemptCols+", key_hash FROM attempts WHERE rollout_id = $1 AND id = $2",
		rolloutID, attemptID)
	var (
		num               int32
		status            string
		ended             *time.Time
		started, lastBeat time.Time
	)
	err := row.Scan(&a.RolloutID, &a.ID, &num, &a.WorkerID, &status, &started, &lastBeat, &ended, &a.Error, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		// Same answer, and about the same work, as a wrong key.
		store.KeyMatches(key, make([]byte, 32))
		return store.Attempt{}, store.Errorf(store.ErrForbidden, "key does not grant attempt %s of rollout %s", attemptID, rolloutID)
	}
	if err != nil {
		return store.Attempt{}, dbErr("attempt by key", err)
	}
	if !store.KeyMatches(key, hash) {
		return store.Attempt{}, store.Errorf(store.ErrForbidden, "key does not grant attempt %s of rollout %s", attemptID, rolloutID)
	}
	a.Number = int(num)
	a.Status = store.AttemptStatus(status)
	a.StartedAt = started.UTC()
	a.LastHeartbeat = lastBeat.UTC()
	if ended != nil {
		e := ended.UTC()
		a.EndedAt = &e
	}
	return a, nil
}

// Reap ends attempts that stopped heart-beating or ran past their timeout.
func (s *Store) Reap(ctx context.Context, at time.Time) (store.ReapResult, error) {
	var res store.ReapResult
	if err := s.check(); err != nil {
		return res, err
	}
	at = norm(at)
	rows, err := s.pool.Query(ctx, `SELECT a.rollout_id, a.id FROM attempts a JOIN rollouts r ON r.id = a.rollout_id
		WHERE a.status = 'running' AND (
			(r.unresponsive_seconds > 0 AND a.last_heartbeat < $1::timestamptz - make_interval(secs => r.unresponsive_seconds))
			OR (r.timeout_seconds > 0 AND a.started_at < $1::timestamptz - make_interval(secs => r.timeout_seconds)))
		ORDER BY a.started_at`, at)
	if err != nil {
		return res, dbErr("reap", err)
	}
	type key struct{ rollout, attempt string }
	var cands []key
	for rows.Next() {
		var k key
		if err := rows.Scan(&k.rollout, &k.attempt); err != nil {
			rows.Close()
			return res, dbErr("reap", err)
		}
		cands = append(cands, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, dbErr("reap", err)
	}
	for _, k := range cands {
		var one store.ReapResult
		err := s.tx(ctx, func(tx pgx.Tx) error {
			one = store.ReapResult{}
			return reapOne(ctx, tx, k.rollout, k.attempt, at, &one)
		})
		if err != nil {
			return res, dbErr("reap", err)
		}
		res.Unresponsive += one.Unresponsive
		res.TimedOut += one.TimedOut
		res.Requeued += one.Requeued
		res.Failed += one.Failed
	}
	return res, nil
}

// reapOne re-checks one candidate under the rollout's lock and ends it.
func reapOne(ctx context.Context, tx pgx.Tx, rolloutID, attemptID string, at time.Time, res *store.ReapResult) error {
	r, a, err := lockRunning(ctx, tx, rolloutID, attemptID)
	if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
		return nil // ended meanwhile
	}
	if err != nil {
		return err
	}
	st, msg, stale := store.Staleness(r, a, at)
	if !stale {
		return nil // heart-beat meanwhile
	}
	if _, err := tx.Exec(ctx, `UPDATE attempts SET status = $3, ended_at = $4, error = $5
		WHERE rollout_id = $1 AND id = $2`, rolloutID, attemptID, string(st), at, msg); err != nil {
		return err
	}
	next, rmsg := store.AttemptOutcome(r, st, msg)
	if _, err := setStatus(ctx, tx, rolloutID, next, rmsg, at); err != nil {
		return err
	}
	res.Count(st, next)
	return nil
}

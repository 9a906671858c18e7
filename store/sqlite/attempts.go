package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/aglrl/agl/store"
)

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
		if req.RolloutID != "" {
			q += ` AND id = ?`
			args = append(args, req.RolloutID)
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
	rows, err := tx.QueryContext(ctx, `SELECT data FROM events WHERE rollout_id = ? AND attempt_id = ? AND type = 'reward' ORDER BY seq`,
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
	if v, d, ok := store.RewardSummary(datas); ok {
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

// reap is Reap without telling the Observer.
func (s *Store) reap(ctx context.Context, at time.Time) (store.ReapResult, error) {
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

package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aglrl/agl/store"
)

const attemptCols = `rollout_id, id, number, worker_id, status, started_at, last_heartbeat, ended_at, error`

// attemptRow receives attemptCols.
type attemptRow struct {
	a             store.Attempt
	num           int32
	status        string
	started, beat time.Time
	ended         *time.Time
}

func (x *attemptRow) dests() []any {
	return []any{&x.a.RolloutID, &x.a.ID, &x.num, &x.a.WorkerID, &x.status, &x.started, &x.beat, &x.ended, &x.a.Error}
}

func (x *attemptRow) value() store.Attempt {
	a := x.a
	a.Number = int(x.num)
	a.Status = store.AttemptStatus(x.status)
	a.StartedAt = x.started.UTC()
	a.LastHeartbeat = x.beat.UTC()
	if x.ended != nil {
		e := x.ended.UTC()
		a.EndedAt = &e
	}
	return a
}

// scanAttempt scans attemptCols, followed by extra destinations if any.
func scanAttempt(row pgx.Row, extra ...any) (store.Attempt, error) {
	var x attemptRow
	if err := row.Scan(append(x.dests(), extra...)...); err != nil {
		return store.Attempt{}, err
	}
	return x.value(), nil
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
//
// One statement (its own transaction) locks the rollout, marks it running
// and inserts the attempt. It skips rows other claimers hold; finding
// nothing that way does not prove the queue empty (the statement's snapshot
// may predate rollouts created meanwhile while the rows it sees are locked
// by claimers about to take them), so unless a fresh look finds no queued
// rollout at all it tries again, then waiting for those locks.
// ErrNoneQueued thus means: at some moment during the call, no rollout was
// queued.
func (s *Store) Claim(ctx context.Context, req store.ClaimRequest) (store.Claim, error) {
	if err := s.check(); err != nil {
		return store.Claim{}, err
	}
	if req.Mode != "" && !req.Mode.Valid() {
		return store.Claim{}, store.Errorf(store.ErrInvalid, "unknown mode %q", req.Mode)
	}
	where := `status IN ('queuing', 'requeuing')`
	// extra are the filter's arguments, numbered after claimOne's four.
	var extra []any
	if req.Mode != "" {
		extra = append(extra, string(req.Mode))
		where += fmt.Sprintf(` AND mode = $%d`, 4+len(extra))
	}
	if req.RolloutID != "" {
		extra = append(extra, req.RolloutID)
		where += fmt.Sprintf(` AND id = $%d`, 4+len(extra))
	}
	for try := 0; ; try++ {
		lock := "FOR UPDATE SKIP LOCKED"
		if try%2 == 1 {
			lock = "FOR UPDATE"
		}
		c, err := s.claimOne(ctx, req.WorkerID, where, lock, extra)
		if !errors.Is(err, pgx.ErrNoRows) {
			if err != nil {
				return store.Claim{}, dbErr("claim", err)
			}
			return c, nil
		}
		if try%2 == 1 {
			continue
		}
		var queued bool
		// The same filter with its arguments renumbered from $1.
		q := where
		for i := range extra {
			q = strings.ReplaceAll(q, fmt.Sprintf("$%d", 5+i), fmt.Sprintf("$%d", 1+i))
		}
		q = `SELECT EXISTS (SELECT 1 FROM rollouts WHERE ` + q + `)`
		if err := s.pool.QueryRow(ctx, q, extra...).Scan(&queued); err != nil {
			return store.Claim{}, dbErr("claim", err)
		}
		if !queued || try >= 20 {
			return store.Claim{}, store.ErrNoneQueued
		}
	}
}

var (
	claimRolloutCols = prefixCols("u.", rolloutCols)
	claimAttemptCols = prefixCols("a.", attemptCols)
)

func (s *Store) claimOne(ctx context.Context, workerID, where, lock string, extra []any) (store.Claim, error) {
	t := now()
	key, hash := store.NewKey()
	args := append([]any{t, store.NewID("at_"), workerID, hash}, extra...)
	row := s.pool.QueryRow(ctx, `WITH c AS (
			SELECT id FROM rollouts WHERE `+where+` ORDER BY seq LIMIT 1 `+lock+`
		), u AS (
			UPDATE rollouts SET status = 'running', num_attempts = num_attempts + 1, updated_at = $1
			FROM c WHERE rollouts.id = c.id RETURNING `+qualifiedRolloutCols+`
		), a AS (
			INSERT INTO attempts (rollout_id, id, number, worker_id, status, key_hash, started_at, last_heartbeat)
			SELECT u.id, $2, u.num_attempts, $3, 'running', $4, $1, $1 FROM u
			RETURNING `+attemptCols+`
		)
		SELECT `+claimRolloutCols+`, `+claimAttemptCols+` FROM u, a`, args...)
	var ar attemptRow
	r, err := scanRollout(row, ar.dests()...)
	if err != nil {
		return store.Claim{}, err
	}
	return store.Claim{Rollout: r, Attempt: ar.value(), Key: key}, nil
}

func prefixCols(prefix, cols string) string {
	parts := splitCols(cols)
	for i, c := range parts {
		parts[i] = prefix + c
	}
	return strings.Join(parts, ", ")
}

// qualifiedRolloutCols is rolloutCols prefixed by the table name, for
// statements that join another relation.
var qualifiedRolloutCols = prefixCols("rollouts.", rolloutCols)

// splitCols splits a column list such as rolloutCols into names.
func splitCols(cols string) []string {
	parts := strings.Split(cols, ",")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
	}
	return parts
}

// Heartbeat records that a running attempt is alive.
func (s *Store) Heartbeat(ctx context.Context, rolloutID, attemptID string) (store.Attempt, error) {
	if err := s.check(); err != nil {
		return store.Attempt{}, err
	}
	a, err := scanAttempt(s.pool.QueryRow(ctx, `UPDATE attempts SET last_heartbeat = $3
		WHERE rollout_id = $1 AND id = $2 AND status = 'running' RETURNING `+attemptCols,
		rolloutID, attemptID, now()))
	if errors.Is(err, pgx.ErrNoRows) {
		var st string
		err = s.pool.QueryRow(ctx, "SELECT status FROM attempts WHERE rollout_id = $1 AND id = $2", rolloutID, attemptID).Scan(&st)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			err = store.Errorf(store.ErrNotFound, "attempt %s of rollout %s", attemptID, rolloutID)
		case err == nil:
			err = store.Errorf(store.ErrConflict, "attempt %s is %s, not running", attemptID, st)
		}
	}
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
		t := now()
		// One round trip: lock the rollout and read the attempt's state,
		// end the attempt if (and only if) it is running, read its rewards.
		b := &pgx.Batch{}
		b.Queue(lockSQL, rolloutID, attemptID)
		b.Queue(`UPDATE attempts SET status = $3, ended_at = $4, error = $5
			WHERE rollout_id = $1 AND id = $2 AND status = 'running'`, rolloutID, attemptID, string(status), t, errMsg)
		b.Queue(`SELECT data FROM events WHERE rollout_id = $1 AND attempt_id = $2
			AND type = 'reward' ORDER BY seq`, rolloutID, attemptID)
		br := tx.SendBatch(ctx, b)
		r, lockErr := scanLock(br.QueryRow(), rolloutID, attemptID)
		if _, err := br.Exec(); err != nil {
			br.Close()
			return err
		}
		rows, err := br.Query()
		if err != nil {
			br.Close()
			return err
		}
		datas, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (json.RawMessage, error) {
			var d []byte
			err := row.Scan(&d)
			return json.RawMessage(d), err
		})
		if err := errors.Join(err, br.Close()); err != nil {
			return err
		}
		if lockErr != nil {
			return lockErr
		}
		rw := &rewardSet{}
		if v, d, ok := store.RewardSummary(datas); ok {
			rw.value, rw.data = &v, []byte(d)
		}
		next, msg := store.AttemptOutcome(r, status, errMsg)
		out, err = setStatus(ctx, tx, rolloutID, next, msg, t, rw)
		return err
	})
	if err != nil {
		return store.Rollout{}, dbErr("complete attempt", err)
	}
	s.bases.Forget(rolloutID, attemptID) // no call of it will be stored again
	return out, nil
}

// lockSQL locks a rollout's row and reads what deciding an attempt's fate
// needs; the attempt's status is NULL when it does not exist.
const lockSQL = `SELECT r.num_attempts, r.max_attempts, a.status FROM rollouts r
	LEFT JOIN attempts a ON a.rollout_id = r.id AND a.id = $2
	WHERE r.id = $1 FOR UPDATE OF r`

// scanLock reads lockSQL's row: ErrNotFound for a missing rollout or
// attempt, ErrConflict when the attempt is not running.
func scanLock(row pgx.Row, rolloutID, attemptID string) (store.Rollout, error) {
	var (
		num, max int32
		st       *string
	)
	err := row.Scan(&num, &max, &st)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return store.Rollout{}, store.Errorf(store.ErrNotFound, "rollout %s", rolloutID)
	case err != nil:
		return store.Rollout{}, err
	case st == nil:
		return store.Rollout{}, store.Errorf(store.ErrNotFound, "attempt %s of rollout %s", attemptID, rolloutID)
	case *st != string(store.AttemptRunning):
		return store.Rollout{}, store.Errorf(store.ErrConflict, "attempt %s is %s, not running", attemptID, *st)
	}
	r := store.Rollout{ID: rolloutID, NumAttempts: int(num)}
	r.Config.MaxAttempts = int(max)
	return r, nil
}

// rewardSet is a rollout's reward summary to store (value nil clears it).
type rewardSet struct {
	value *float64
	data  []byte
}

// AttemptByKey returns the attempt if key is its scoped key.
func (s *Store) AttemptByKey(ctx context.Context, rolloutID, attemptID, key string) (store.Attempt, error) {
	if err := s.check(); err != nil {
		return store.Attempt{}, err
	}
	var hash []byte
	a, err := scanAttempt(s.pool.QueryRow(ctx, "SELECT "+attemptCols+", key_hash FROM attempts WHERE rollout_id = $1 AND id = $2",
		rolloutID, attemptID), &hash)
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
	return a, nil
}

// reap is Reap without telling the Observer.
func (s *Store) reap(ctx context.Context, at time.Time) (store.ReapResult, error) {
	var res store.ReapResult
	if err := s.check(); err != nil {
		return res, err
	}
	at = norm(at)
	// One pass at a time over all replicas sharing the database: the
	// others skip theirs (a session lock, held across the pass's
	// transactions, keyed by schema).
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return res, dbErr("reap", err)
	}
	var locked bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1, hashtext(current_schema()))", int32(ReapLock)).Scan(&locked); err != nil {
		conn.Release()
		return res, dbErr("reap lock", err)
	}
	if !locked {
		conn.Release()
		return res, nil
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1, hashtext(current_schema()))", int32(ReapLock)); err != nil {
			// A connection whose unlock failed must not go back to the
			// pool still holding the lock.
			conn.Hijack().Close(context.WithoutCancel(ctx))
			return
		}
		conn.Release()
	}()
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

// ReapLock is the first key of the advisory lock (pg_locks classid) a
// reaper pass holds; the second is hashtext(current_schema()).
const ReapLock = 0x61676c72 // "aglr"

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
	if _, err := setStatus(ctx, tx, rolloutID, next, rmsg, at, nil); err != nil {
		return err
	}
	res.Count(st, next)
	return nil
}

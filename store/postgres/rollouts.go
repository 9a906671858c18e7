package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aglrl/agl/store"
)

const rolloutCols = `id, seq, group_id, task, mode, metadata, timeout_seconds, max_attempts,
	unresponsive_seconds, status, num_attempts, error, reward, reward_data,
	created_at, updated_at, terminal_seq, step`

// scanRollout scans rolloutCols, followed by extra destinations if any.
func scanRollout(row pgx.Row, extra ...any) (store.Rollout, error) {
	var (
		r                    store.Rollout
		task, meta, rwdData  []byte
		mode, status         string
		created, updated     time.Time
		maxAttempts, numAtts int32
	)
	dest := append([]any{&r.ID, &r.Seq, &r.GroupID, &task, &mode, &meta, &r.Config.TimeoutSeconds,
		&maxAttempts, &r.Config.UnresponsiveSeconds, &status, &numAtts, &r.Error,
		&r.Reward, &rwdData, &created, &updated, &r.TerminalSeq, &r.Step}, extra...)
	err := row.Scan(dest...)
	if err != nil {
		return store.Rollout{}, err
	}
	r.Task = json.RawMessage(task)
	if meta != nil {
		r.Metadata = json.RawMessage(meta)
	}
	if rwdData != nil {
		r.RewardData = json.RawMessage(rwdData)
	}
	r.Mode = store.Mode(mode)
	r.Status = store.RolloutStatus(status)
	r.Config.MaxAttempts = int(maxAttempts)
	r.NumAttempts = int(numAtts)
	r.CreatedAt = created.UTC()
	r.UpdatedAt = updated.UTC()
	return r, nil
}

func collectRollouts(rows pgx.Rows) ([]store.Rollout, error) {
	defer rows.Close()
	var out []store.Rollout
	for rows.Next() {
		r, err := scanRollout(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// validateNew checks and normalises one NewRollout (store.Normalize plus
// what PostgreSQL cannot store).
func validateNew(nr store.NewRollout) (store.NewRollout, error) {
	nr, err := nr.Normalize()
	if err != nil {
		return nr, err
	}
	c := nr.Config
	switch {
	case bad(c.TimeoutSeconds), bad(c.UnresponsiveSeconds):
		return nr, store.Errorf(store.ErrInvalid, "rollout %s: timeout_seconds and unresponsive_seconds must be finite numbers >= 0", nr.ID)
	case c.MaxAttempts > math.MaxInt32:
		return nr, store.Errorf(store.ErrInvalid, "rollout %s: max_attempts %d too large", nr.ID, c.MaxAttempts)
	}
	return nr, nil
}

// CreateRollouts creates rollouts atomically; existing ids are returned as stored.
func (s *Store) CreateRollouts(ctx context.Context, rs []store.NewRollout) ([]store.Rollout, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	norms := make([]store.NewRollout, len(rs))
	for i, nr := range rs {
		n, err := validateNew(nr)
		if err != nil {
			return nil, err
		}
		norms[i] = n
	}
	if len(norms) == 0 {
		return []store.Rollout{}, nil
	}
	out := make([]store.Rollout, len(norms))
	// The inserts go in one batch: one round trip, one implicit
	// transaction, so the batch is atomic.
	b := &pgx.Batch{}
	t := now()
	for _, nr := range norms {
		var meta []byte
		if len(nr.Metadata) > 0 {
			meta = []byte(nr.Metadata)
		}
		b.Queue(`INSERT INTO rollouts (id, group_id, task, mode, metadata, timeout_seconds,
			max_attempts, unresponsive_seconds, status, created_at, updated_at, step)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'queuing', $9, $9, $10)
			ON CONFLICT (id) DO NOTHING
			RETURNING `+rolloutCols,
			nr.ID, nr.GroupID, []byte(nr.Task), string(nr.Mode), meta, nr.Config.TimeoutSeconds,
			int32(nr.Config.MaxAttempts), nr.Config.UnresponsiveSeconds, t, nr.Step)
	}
	b.Queue(notifySQL)   // a queue change: wake every replica
	var missing []string // ids that already existed, or repeat within the batch
	err := s.retry(func() error {
		missing = missing[:0]
		br := s.pool.SendBatch(ctx, b)
		for i := range norms {
			r, err := scanRollout(br.QueryRow())
			if errors.Is(err, pgx.ErrNoRows) {
				missing = append(missing, norms[i].ID)
				continue
			}
			if err != nil {
				br.Close()
				return err
			}
			out[i] = r
		}
		if _, err := br.Exec(); err != nil {
			br.Close()
			return err
		}
		return br.Close()
	})
	if err == nil && len(missing) > 0 {
		var rows pgx.Rows
		rows, err = s.pool.Query(ctx, "SELECT "+rolloutCols+" FROM rollouts WHERE id = ANY($1)", missing)
		var found []store.Rollout
		if err == nil {
			found, err = collectRollouts(rows)
		}
		byID := map[string]store.Rollout{}
		for _, r := range found {
			byID[r.ID] = r
		}
		for i, nr := range norms {
			if out[i].ID == "" {
				r, ok := byID[nr.ID]
				if !ok && err == nil {
					err = fmt.Errorf("rollout %s neither inserted nor found", nr.ID)
				}
				out[i] = r
			}
		}
	}
	if err != nil {
		return nil, dbErr("create rollouts", err)
	}
	return out, nil
}

// GetRollout returns one rollout with its attempts.
func (s *Store) GetRollout(ctx context.Context, id string) (store.Rollout, error) {
	if err := s.check(); err != nil {
		return store.Rollout{}, err
	}
	var r store.Rollout
	// One snapshot for the rollout and its attempts.
	opts := pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
	err := pgx.BeginTxFunc(ctx, s.pool, opts, func(tx pgx.Tx) error {
		var err error
		r, err = getRollout(ctx, tx, id, "")
		if err != nil {
			return err
		}
		r.Attempts, err = listAttempts(ctx, tx, id)
		return err
	})
	if err != nil {
		return store.Rollout{}, dbErr("get rollout", err)
	}
	return r, nil
}

// getRollout reads one rollout; lock is "" or a locking clause.
func getRollout(ctx context.Context, q pgx.Tx, id, lock string) (store.Rollout, error) {
	r, err := scanRollout(q.QueryRow(ctx, "SELECT "+rolloutCols+" FROM rollouts WHERE id = $1 "+lock, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Rollout{}, store.Errorf(store.ErrNotFound, "rollout %s", id)
	}
	return r, err
}

// ListRollouts pages through rollouts in creation order.
func (s *Store) ListRollouts(ctx context.Context, f store.RolloutFilter) ([]store.Rollout, int64, error) {
	if err := s.check(); err != nil {
		return nil, 0, err
	}
	limit := store.PageLimit(f.Limit)
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if len(f.Status) > 0 {
		ss := make([]string, len(f.Status))
		for i, st := range f.Status {
			if !st.Valid() {
				return nil, 0, store.Errorf(store.ErrInvalid, "unknown rollout status %q", st)
			}
			ss[i] = string(st)
		}
		where = append(where, "status = ANY("+arg(ss)+")")
	}
	if f.GroupID != "" {
		where = append(where, "group_id = "+arg(f.GroupID))
	}
	if f.Mode != "" {
		if !f.Mode.Valid() {
			return nil, 0, store.Errorf(store.ErrInvalid, "unknown mode %q", f.Mode)
		}
		where = append(where, "mode = "+arg(string(f.Mode)))
	}
	if f.Step != nil {
		where = append(where, "step = "+arg(*f.Step))
	}
	if f.MinReward != nil {
		where = append(where, "reward >= "+arg(*f.MinReward))
	}
	if f.MaxReward != nil {
		where = append(where, "reward <= "+arg(*f.MaxReward))
	}
	order := "ASC"
	if f.Desc {
		order = "DESC"
		if f.Cursor > 0 {
			where = append(where, "seq < "+arg(f.Cursor))
		}
	} else if f.Cursor > 0 {
		where = append(where, "seq > "+arg(f.Cursor))
	}
	q := "SELECT " + rolloutCols + " FROM rollouts"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY seq " + order + " LIMIT " + arg(limit+1)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, 0, dbErr("list rollouts", err)
	}
	rs, err := collectRollouts(rows)
	if err != nil {
		return nil, 0, dbErr("list rollouts", err)
	}
	var next int64
	if len(rs) > limit {
		rs = rs[:limit]
		next = rs[limit-1].Seq
	}
	if rs == nil {
		rs = []store.Rollout{}
	}
	return rs, next, nil
}

// CountRollouts counts rollouts by status.
func (s *Store) CountRollouts(ctx context.Context) (store.Counts, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, "SELECT status, count(*) FROM rollouts GROUP BY status")
	if err != nil {
		return nil, dbErr("count rollouts", err)
	}
	defer rows.Close()
	c := store.Counts{}
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return nil, dbErr("count rollouts", err)
		}
		c[store.RolloutStatus(st)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr("count rollouts", err)
	}
	return c, nil
}

// CancelRollout cancels a non-terminal rollout and fails its running attempt.
func (s *Store) CancelRollout(ctx context.Context, id, reason string) (store.Rollout, error) {
	msg := "cancelled"
	if reason != "" {
		msg += ": " + reason
	}
	var r store.Rollout
	err := s.tx(ctx, func(tx pgx.Tx) error {
		cur, err := getRollout(ctx, tx, id, "FOR UPDATE")
		if err != nil {
			return err
		}
		if cur.Status.Terminal() {
			return store.Errorf(store.ErrConflict, "rollout %s is %s, cannot cancel", id, cur.Status)
		}
		t := now()
		if _, err := tx.Exec(ctx, `UPDATE attempts SET status = 'failed', ended_at = $2, error = $3
			WHERE rollout_id = $1 AND status = 'running'`, id, t, msg); err != nil {
			return err
		}
		r, err = setStatus(ctx, tx, id, store.RolloutCancelled, msg, t, nil)
		return err
	})
	if err != nil {
		return store.Rollout{}, dbErr("cancel rollout", err)
	}
	return r, nil
}

// setStatus moves a locked rollout to st with error text errMsg, and sets
// its reward summary when rw is not nil. A terminal st takes the next
// terminal sequence number from the counter row, whose lock is held until
// commit, so the numbers are handed out in commit order.
func setStatus(ctx context.Context, tx pgx.Tx, id string, st store.RolloutStatus, errMsg string, t time.Time, rw *rewardSet) (store.Rollout, error) {
	reward := ""
	args := []any{id, string(st), errMsg, t, st.Terminal()}
	if rw != nil {
		reward = ", reward = $6, reward_data = $7"
		args = append(args, rw.value, rw.data)
	}
	r, err := scanRollout(tx.QueryRow(ctx, `WITH c AS (
			UPDATE counters SET v = v + 1 WHERE name = 'terminal' AND $5::bool RETURNING v
		)
		UPDATE rollouts SET status = $2, error = $3, updated_at = $4,
			terminal_seq = coalesce((SELECT v FROM c), 0)`+reward+`
		WHERE id = $1 RETURNING `+rolloutCols, args...))
	if err != nil {
		return r, err
	}
	// Every status change may end a wait (terminal long-polls, the queue).
	return r, notify(ctx, tx)
}

// Terminal returns rollouts that became terminal after the cursor, in order.
func (s *Store) Terminal(ctx context.Context, after int64, limit int) ([]store.Rollout, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	n := store.PageLimit(limit)
	rows, err := s.pool.Query(ctx, "SELECT "+rolloutCols+` FROM rollouts
		WHERE terminal_seq > $1 ORDER BY terminal_seq LIMIT $2`, after, n)
	if err != nil {
		return nil, dbErr("terminal", err)
	}
	rs, err := collectRollouts(rows)
	if err != nil {
		return nil, dbErr("terminal", err)
	}
	if rs == nil {
		rs = []store.Rollout{}
	}
	return rs, nil
}

func bad(f float64) bool { return math.IsNaN(f) || math.IsInf(f, 0) || f < 0 }

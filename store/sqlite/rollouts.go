package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/aglrl/agl/store"
)

const rolloutCols = `seq, id, group_id, task, mode, metadata, timeout_s, max_attempts, unresponsive_s,
	status, num_attempts, error, reward, reward_data, created_at, updated_at, terminal_seq, step`

func scanRollout(sc scanner) (store.Rollout, error) {
	var r store.Rollout
	var task, meta, rdata []byte
	var reward sql.NullFloat64
	var created, updated int64
	var term, step sql.NullInt64
	var mode, status string
	err := sc.Scan(&r.Seq, &r.ID, &r.GroupID, &task, &mode, &meta, &r.Config.TimeoutSeconds,
		&r.Config.MaxAttempts, &r.Config.UnresponsiveSeconds, &status, &r.NumAttempts, &r.Error,
		&reward, &rdata, &created, &updated, &term, &step)
	if err != nil {
		return r, err
	}
	r.Task = json.RawMessage(task)
	if len(meta) > 0 {
		r.Metadata = json.RawMessage(meta)
	}
	if len(rdata) > 0 {
		r.RewardData = json.RawMessage(rdata)
	}
	if reward.Valid {
		v := reward.Float64
		r.Reward = &v
	}
	r.Mode = store.Mode(mode)
	r.Status = store.RolloutStatus(status)
	r.CreatedAt, r.UpdatedAt = fromTS(created), fromTS(updated)
	r.TerminalSeq = term.Int64
	if step.Valid {
		v := step.Int64
		r.Step = &v
	}
	return r, nil
}

func getRollout(ctx context.Context, q querier, id string) (store.Rollout, error) {
	r, err := scanRollout(q.QueryRowContext(ctx, `SELECT `+rolloutCols+` FROM rollouts WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return r, store.Errorf(store.ErrNotFound, "rollout %q", id)
	}
	if err != nil {
		return r, fmt.Errorf("sqlite store: get rollout %s: %w", id, err)
	}
	return r, nil
}

// CreateRollouts implements store.Store.
func (s *Store) CreateRollouts(ctx context.Context, in []store.NewRollout) ([]store.Rollout, error) {
	norm := make([]store.NewRollout, len(in))
	for i, n := range in {
		var err error
		if norm[i], err = n.Normalize(); err != nil {
			return nil, err
		}
	}
	out := make([]store.Rollout, len(norm))
	err := s.tx(ctx, func(tx wtx) error {
		ins, err := tx.stmt(ctx, `INSERT INTO rollouts (id, group_id, task, mode, metadata, timeout_s, max_attempts,
			unresponsive_s, status, created_at, updated_at, step) VALUES (?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(id) DO NOTHING`)
		if err != nil {
			return fmt.Errorf("sqlite store: prepare: %w", err)
		}
		t := ts(now())
		for i, n := range norm {
			var meta any
			if len(n.Metadata) > 0 {
				meta = []byte(n.Metadata)
			}
			var step any
			if n.Step != nil {
				step = *n.Step
			}
			if _, err := ins.ExecContext(ctx, n.ID, n.GroupID, []byte(n.Task), string(n.Mode), meta, n.Config.TimeoutSeconds,
				n.Config.MaxAttempts, n.Config.UnresponsiveSeconds, string(store.RolloutQueuing), t, t, step); err != nil {
				return fmt.Errorf("sqlite store: insert rollout %s: %w", n.ID, err)
			}
			if out[i], err = getRollout(ctx, tx, n.ID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetRollout implements store.Store.
func (s *Store) GetRollout(ctx context.Context, id string) (store.Rollout, error) {
	r, err := getRollout(ctx, s.r, id)
	if err != nil {
		return r, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT `+attemptCols+` FROM attempts WHERE rollout_id = ? ORDER BY number`, id)
	if err != nil {
		return r, fmt.Errorf("sqlite store: list attempts of %s: %w", id, err)
	}
	defer rows.Close()
	for rows.Next() {
		a, err := scanAttempt(rows)
		if err != nil {
			return r, fmt.Errorf("sqlite store: scan attempt: %w", err)
		}
		r.Attempts = append(r.Attempts, a)
	}
	return r, rows.Err()
}

// ListRollouts implements store.Store.
func (s *Store) ListRollouts(ctx context.Context, f store.RolloutFilter) ([]store.Rollout, int64, error) {
	where, args := []string{}, []any{}
	if len(f.Status) > 0 {
		ph := make([]string, len(f.Status))
		for i, st := range f.Status {
			ph[i] = "?"
			args = append(args, string(st))
		}
		where = append(where, "status IN ("+strings.Join(ph, ",")+")")
	}
	if f.GroupID != "" {
		where = append(where, "group_id = ?")
		args = append(args, f.GroupID)
	}
	if f.Mode != "" {
		where = append(where, "mode = ?")
		args = append(args, string(f.Mode))
	}
	if f.Step != nil {
		where = append(where, "step = ?")
		args = append(args, *f.Step)
	}
	if f.MinReward != nil {
		where = append(where, "reward >= ?")
		args = append(args, *f.MinReward)
	}
	if f.MaxReward != nil {
		where = append(where, "reward <= ?")
		args = append(args, *f.MaxReward)
	}
	order := "ASC"
	if f.Desc {
		order = "DESC"
		if f.Cursor > 0 {
			where = append(where, "seq < ?")
			args = append(args, f.Cursor)
		}
	} else if f.Cursor > 0 {
		where = append(where, "seq > ?")
		args = append(args, f.Cursor)
	}
	limit := store.PageLimit(f.Limit)
	q := `SELECT ` + rolloutCols + ` FROM rollouts`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += fmt.Sprintf(" ORDER BY seq %s LIMIT %d", order, limit+1)
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, 0, fmt.Errorf("sqlite store: list rollouts: %w", err)
	}
	defer rows.Close()
	var out []store.Rollout
	for rows.Next() {
		r, err := scanRollout(rows)
		if err != nil {
			return nil, 0, fmt.Errorf("sqlite store: scan rollout: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("sqlite store: list rollouts: %w", err)
	}
	var next int64
	if len(out) > limit {
		out = out[:limit]
		next = out[limit-1].Seq
	}
	return out, next, nil
}

// CountRollouts implements store.Store.
func (s *Store) CountRollouts(ctx context.Context) (store.Counts, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT status, COUNT(*) FROM rollouts GROUP BY status`)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: count rollouts: %w", err)
	}
	defer rows.Close()
	c := store.Counts{}
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return nil, fmt.Errorf("sqlite store: count rollouts: %w", err)
		}
		c[store.RolloutStatus(st)] = n
	}
	return c, rows.Err()
}

// nextTerminalSeq is safe because all writes are serialized on one
// connection. The IS NOT NULL lets SQLite read the maximum from the partial
// index rollouts_terminal instead of scanning the table.
func nextTerminalSeq(ctx context.Context, tx wtx) (int64, error) {
	var n int64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(terminal_seq), 0) + 1 FROM rollouts WHERE terminal_seq IS NOT NULL`).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite store: terminal seq: %w", err)
	}
	return n, nil
}

// setRolloutStatus moves a rollout to st (assigning a terminal seq when st is
// terminal) and returns it as stored.
func setRolloutStatus(ctx context.Context, tx wtx, r store.Rollout, st store.RolloutStatus, errMsg string, t time.Time) (store.Rollout, error) {
	var term any
	if st.Terminal() {
		n, err := nextTerminalSeq(ctx, tx)
		if err != nil {
			return r, err
		}
		term = n
	}
	if _, err := tx.ExecContext(ctx, `UPDATE rollouts SET status = ?, error = ?, updated_at = ?, terminal_seq = ? WHERE id = ?`,
		string(st), errMsg, ts(t), term, r.ID); err != nil {
		return r, fmt.Errorf("sqlite store: update rollout %s: %w", r.ID, err)
	}
	return getRollout(ctx, tx, r.ID)
}

// CancelRollout implements store.Store.
func (s *Store) CancelRollout(ctx context.Context, id, reason string) (store.Rollout, error) {
	var out store.Rollout
	err := s.endingTx(ctx, func(tx wtx) error {
		r, err := getRollout(ctx, tx, id)
		if err != nil {
			return err
		}
		if r.Status.Terminal() {
			return store.Errorf(store.ErrConflict, "rollout %s is already %s", id, r.Status)
		}
		t := now()
		msg := "cancelled"
		if reason != "" {
			msg += ": " + reason
		}
		if a, ok, err := runningAttempt(ctx, tx, id); err != nil {
			return err
		} else if ok {
			if err := endAttempt(ctx, tx, a, store.AttemptFailed, msg, t); err != nil {
				return err
			}
		}
		out, err = setRolloutStatus(ctx, tx, r, store.RolloutCancelled, msg, t)
		return err
	})
	return out, err
}

// Terminal implements store.Store.
func (s *Store) Terminal(ctx context.Context, after int64, limit int) ([]store.Rollout, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+rolloutCols+` FROM rollouts WHERE terminal_seq > ? ORDER BY terminal_seq LIMIT ?`,
		after, store.PageLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("sqlite store: terminal: %w", err)
	}
	defer rows.Close()
	out := []store.Rollout{}
	for rows.Next() {
		r, err := scanRollout(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite store: scan rollout: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

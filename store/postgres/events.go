package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aglrl/agl/store"
)

// MaxEventBatch bounds how many events one AppendEvents call may carry.
const MaxEventBatch = 10000

// AppendEvents appends events to a running attempt, atomically and in order.
func (s *Store) AppendEvents(ctx context.Context, rolloutID, attemptID string, evs []store.NewEvent) ([]store.Event, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if len(evs) > MaxEventBatch {
		return nil, store.Errorf(store.ErrInvalid, "%d events in one batch, more than %d", len(evs), MaxEventBatch)
	}
	evs, err := store.ValidateEvents(evs, now())
	if err != nil {
		return nil, err
	}
	out := make([]store.Event, len(evs))
	types := make([]string, len(evs))
	times := make([]time.Time, len(evs))
	datas := make([][]byte, len(evs))
	for i, e := range evs {
		et := norm(e.Time)
		types[i], times[i], datas[i] = e.Type, et, []byte(e.Data)
		out[i] = store.Event{RolloutID: rolloutID, AttemptID: attemptID, Type: e.Type, Time: et, Data: e.Data}
	}
	// One round trip, one implicit transaction: lock the rollout's row
	// (which orders appends of one rollout by commit, and excludes the
	// attempt ending meanwhile) and check the attempt is running, then
	// insert, guarded by the same check. Sequence numbers are drawn first
	// and handed out in ascending order to the events in input order,
	// whatever order the rows are produced in.
	b := &pgx.Batch{}
	b.Queue(lockSQL, rolloutID, attemptID)
	if len(evs) > 0 {
		b.Queue(`WITH s AS (
				SELECT nextval(pg_get_serial_sequence('events', 'seq')) AS seq
				FROM generate_series(1, $3::int)
			), n AS (
				SELECT seq, row_number() OVER (ORDER BY seq) AS ord FROM s
			)
			INSERT INTO events (seq, rollout_id, attempt_id, type, time, data)
			SELECT n.seq, $1, $2, u.type, u.time, u.data
			FROM unnest($4::text[], $5::timestamptz[], $6::bytea[]) WITH ORDINALITY AS u(type, time, data, ord)
			JOIN n ON n.ord = u.ord
			WHERE EXISTS (SELECT 1 FROM attempts WHERE rollout_id = $1 AND id = $2 AND status = 'running')
			RETURNING seq`, rolloutID, attemptID, len(evs), types, times, datas)
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	br := s.pool.SendBatch(ctx, b)
	_, lockErr := scanLock(br.QueryRow(), rolloutID, attemptID)
	var seqs []int64
	if len(evs) > 0 {
		rows, err := br.Query()
		if err == nil {
			seqs, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		}
		if err != nil {
			br.Close()
			return nil, dbErr("append events", err)
		}
	}
	// Close waits for the commit.
	if err := br.Close(); err != nil {
		return nil, dbErr("append events", err)
	}
	if lockErr != nil {
		return nil, dbErr("append events", lockErr)
	}
	if len(seqs) != len(evs) {
		return nil, fmt.Errorf("postgres: append events: inserted %d events, expected %d", len(seqs), len(evs))
	}
	slices.Sort(seqs)
	for i := range out {
		out[i].Seq = seqs[i]
	}
	return out, nil
}

// ListEvents returns a rollout's events in sequence order. A Limit <= 0
// returns all of them.
func (s *Store) ListEvents(ctx context.Context, f store.EventFilter) ([]store.Event, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if f.RolloutID == "" {
		return nil, store.Errorf(store.ErrInvalid, "rollout id is required to list events")
	}
	args := []any{f.RolloutID, f.AfterSeq}
	q := `SELECT seq, rollout_id, attempt_id, type, time, data FROM events WHERE rollout_id = $1 AND seq > $2`
	if f.AttemptID != "" {
		args = append(args, f.AttemptID)
		q += fmt.Sprintf(" AND attempt_id = $%d", len(args))
	}
	if len(f.Types) > 0 {
		args = append(args, f.Types)
		q += fmt.Sprintf(" AND type = ANY($%d)", len(args))
	}
	q += " ORDER BY seq"
	if f.Limit > 0 {
		args = append(args, f.Limit)
		q += fmt.Sprintf(" LIMIT $%d", len(args))
	}
	var out []store.Event
	err := s.tx(ctx, func(tx pgx.Tx) error {
		out = out[:0]
		rows, err := tx.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				e    store.Event
				t    time.Time
				data []byte
			)
			if err := rows.Scan(&e.Seq, &e.RolloutID, &e.AttemptID, &e.Type, &t, &data); err != nil {
				return err
			}
			e.Time = t.UTC()
			e.Data = json.RawMessage(data)
			out = append(out, e)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(out) == 0 {
			var one int
			err := tx.QueryRow(ctx, "SELECT 1 FROM rollouts WHERE id = $1", f.RolloutID).Scan(&one)
			if errors.Is(err, pgx.ErrNoRows) {
				return store.Errorf(store.ErrNotFound, "rollout %s", f.RolloutID)
			}
			return err
		}
		return nil
	})
	if err != nil {
		return nil, dbErr("list events", err)
	}
	if out == nil {
		out = []store.Event{}
	}
	return out, nil
}

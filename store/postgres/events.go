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

// appendEvents is AppendEvents without telling the Observer.
func (s *Store) appendEvents(ctx context.Context, rolloutID, attemptID string, evs []store.NewEvent) ([]store.Event, error) {
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
	if len(evs) == 0 {
		// Nothing to write, but the attempt must still exist and run.
		err := s.retry(func() error {
			_, err := scanLock(s.pool.QueryRow(ctx, lockSQL, rolloutID, attemptID), rolloutID, attemptID)
			return err
		})
		if err != nil {
			return nil, dbErr("append events", err)
		}
		return []store.Event{}, nil
	}
	if s.plain {
		return s.events.Append(ctx, rolloutID, attemptID, evs)
	}
	// Encode here, on the caller's goroutine, not in the shared commit:
	// against the latest committed call of the attempt and agent.
	enc := s.bases.BatchFrom(baseSource{ctx, s})
	encs := make([]store.Encoding, len(evs))
	stored := slices.Clone(evs)
	for i := range stored {
		encs[i] = enc.Encode(rolloutID, attemptID, stored[i])
		stored[i].Data = encs[i].Data
	}
	out, err := s.events.Append(ctx, rolloutID, attemptID, stored)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Data = evs[i].Data
		enc.Stored(rolloutID, attemptID, encs[i], out[i].Seq)
	}
	enc.Commit() // committed: bases of later calls
	return out, nil
}

// baseSource reads the bases of calls not cached (store.BaseSource) from
// committed events.
type baseSource struct {
	ctx context.Context
	s   *Store
}

func (b baseSource) RecentCalls(rid, aid string, n int) ([]store.Event, error) {
	rows, err := b.s.pool.Query(b.ctx, "SELECT seq, data FROM events WHERE rollout_id = $1 AND attempt_id = $2 AND type = $3 ORDER BY seq DESC LIMIT $4",
		rid, aid, store.EventModelRequest, n)
	if err != nil {
		return nil, fmt.Errorf("postgres: recent calls: %w", err)
	}
	defer rows.Close()
	var out []store.Event
	for rows.Next() {
		var e store.Event
		var d []byte
		if err := rows.Scan(&e.Seq, &d); err != nil {
			return nil, fmt.Errorf("postgres: recent calls: %w", err)
		}
		e.Data = d
		out = append(out, e)
	}
	return out, rows.Err()
}

func (b baseSource) EventData(seq int64) ([]byte, error) {
	var d []byte
	err := b.s.pool.QueryRow(b.ctx, "SELECT data FROM events WHERE seq = $1", seq).Scan(&d)
	return d, err
}

// commitEvents is the store.CommitFunc of s.events: one round trip, one
// implicit transaction for a batch of appends. It locks the batch's
// rollouts' rows in id order (which orders appends of one rollout by
// commit, excludes an attempt ending meanwhile, and cannot deadlock with
// another batch), reads the attempts' statuses, then inserts the events of
// the running attempts, guarded by the same check. Sequence numbers are
// drawn first and handed out in ascending order to the events in batch
// order, whatever order the rows are produced in.
func (s *Store) commitEvents(ctx context.Context, batch []*store.Append) error {
	var rids, aids, pairR, pairA, types []string
	var times []time.Time
	var datas [][]byte
	seen := map[[2]string]bool{}
	for _, a := range batch {
		if !seen[[2]string{a.RolloutID, ""}] {
			seen[[2]string{a.RolloutID, ""}] = true
			rids = append(rids, a.RolloutID)
		}
		if k := [2]string{a.RolloutID, a.AttemptID}; !seen[k] {
			seen[k] = true
			pairR, pairA = append(pairR, a.RolloutID), append(pairA, a.AttemptID)
		}
		for _, e := range a.Events {
			aids = append(aids, a.AttemptID)
			types, times, datas = append(types, e.Type), append(times, norm(e.Time)), append(datas, []byte(e.Data))
		}
	}
	evRids := make([]string, 0, len(aids))
	for _, a := range batch {
		for range a.Events {
			evRids = append(evRids, a.RolloutID)
		}
	}
	return dbErr("append events", s.retry(func() error {
		b := &pgx.Batch{}
		b.Queue(`SELECT id FROM rollouts WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE`, rids)
		b.Queue(`SELECT u.rid, u.aid, r.id IS NOT NULL, a.status
			FROM unnest($1::text[], $2::text[]) AS u(rid, aid)
			LEFT JOIN rollouts r ON r.id = u.rid
			LEFT JOIN attempts a ON a.rollout_id = u.rid AND a.id = u.aid`, pairR, pairA)
		b.Queue(`WITH s AS (
				SELECT nextval(pg_get_serial_sequence('events', 'seq')) AS seq
				FROM generate_series(1, $1::int)
			), n AS (
				SELECT seq, row_number() OVER (ORDER BY seq) AS ord FROM s
			)
			INSERT INTO events (seq, rollout_id, attempt_id, type, time, data)
			SELECT n.seq, u.rid, u.aid, u.type, u.time, u.data
			FROM unnest($2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::bytea[]) WITH ORDINALITY AS u(rid, aid, type, time, data, ord)
			JOIN n ON n.ord = u.ord
			WHERE EXISTS (SELECT 1 FROM attempts a WHERE a.rollout_id = u.rid AND a.id = u.aid AND a.status = 'running')
			RETURNING seq`, len(types), evRids, aids, types, times, datas)
		br := s.pool.SendBatch(ctx, b)
		if _, err := br.Exec(); err != nil {
			br.Close()
			return err
		}
		type status struct {
			rollout bool
			attempt *string
		}
		statuses := map[[2]string]status{}
		rows, err := br.Query()
		if err == nil {
			for rows.Next() {
				var rid, aid string
				var st status
				if err = rows.Scan(&rid, &aid, &st.rollout, &st.attempt); err != nil {
					break
				}
				statuses[[2]string{rid, aid}] = st
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		if err != nil {
			br.Close()
			return err
		}
		rows, err = br.Query()
		var seqs []int64
		if err == nil {
			seqs, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		}
		if err != nil {
			br.Close()
			return err
		}
		// Close waits for the commit.
		if err := br.Close(); err != nil {
			return err
		}
		slices.Sort(seqs)
		next := 0
		for _, a := range batch {
			a.Stored, a.Err = nil, nil
			st := statuses[[2]string{a.RolloutID, a.AttemptID}]
			switch {
			case !st.rollout:
				a.Err = store.Errorf(store.ErrNotFound, "rollout %s", a.RolloutID)
				continue
			case st.attempt == nil:
				a.Err = store.Errorf(store.ErrNotFound, "attempt %s of rollout %s", a.AttemptID, a.RolloutID)
				continue
			case *st.attempt != string(store.AttemptRunning):
				a.Err = store.Errorf(store.ErrConflict, "attempt %s is %s, not running", a.AttemptID, *st.attempt)
				continue
			}
			if next+len(a.Events) > len(seqs) {
				return fmt.Errorf("inserted %d events, expected more", len(seqs))
			}
			out := make([]store.Event, len(a.Events))
			for i, e := range a.Events {
				out[i] = store.Event{Seq: seqs[next+i], RolloutID: a.RolloutID, AttemptID: a.AttemptID, Type: e.Type, Time: norm(e.Time), Data: e.Data}
			}
			next += len(a.Events)
			a.Stored = out
		}
		if next != len(seqs) {
			return fmt.Errorf("inserted %d events, expected %d", len(seqs), next)
		}
		return nil
	}))
}

// StoredEventBytes implements store.StoredBytes.
func (s *Store) StoredEventBytes(ctx context.Context, rolloutID, attemptID, eventType string) (int64, error) {
	var n int64
	err := s.tx(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT COALESCE(SUM(octet_length(data)), 0)::bigint FROM events WHERE rollout_id = $1 AND attempt_id = $2 AND type = $3`,
			rolloutID, attemptID, eventType).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("postgres store: stored event bytes: %w", err)
	}
	return n, nil
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
	if f.Desc {
		q += " DESC"
	}
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
		if f.Desc {
			slices.Reverse(out) // bases decode oldest first
		}
		err = s.bases.DecodeEvents(out, func(seq int64) ([]byte, error) {
			var d []byte
			err := tx.QueryRow(ctx, "SELECT data FROM events WHERE seq = $1", seq).Scan(&d)
			return d, err
		})
		if f.Desc {
			slices.Reverse(out)
		}
		if err != nil {
			return fmt.Errorf("events of rollout %s: %w", f.RolloutID, err)
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

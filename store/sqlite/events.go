package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/aglrl/agl/store"
)

// AppendEvents implements store.Store. Concurrent calls share write
// transactions (store.GroupCommit): each returns once the transaction
// holding its events committed.
func (s *Store) AppendEvents(ctx context.Context, rolloutID, attemptID string, in []store.NewEvent) ([]store.Event, error) {
	evs, err := store.ValidateEvents(in, now())
	if err != nil {
		return nil, err
	}
	if s.journal != nil {
		// Events journaled before this call come first.
		if err := s.journal.flush(ctx); err != nil {
			return nil, err
		}
	}
	out, err := s.events.Append(ctx, rolloutID, attemptID, evs)
	if err == nil && s.obs != nil {
		s.obs.EventsStored(in)
	}
	return out, err
}

// RecordEvents implements store.EventRecorder: the events are durable
// once written to the event journal (see journal.go), and copied into
// SQLite in the background; without a journal (synchronous=FULL) it is
// AppendEvents.
func (s *Store) RecordEvents(ctx context.Context, rolloutID, attemptID string, in []store.NewEvent) error {
	if s.journal != nil && len(in) > 0 {
		evs, err := store.ValidateEvents(in, now())
		if err != nil {
			return err
		}
		if err := s.journal.record(ctx, rolloutID, attemptID, evs); !errors.Is(err, errJournalOff) {
			if err == nil && s.obs != nil {
				s.obs.EventsStored(in)
			}
			return err
		}
	}
	_, err := s.AppendEvents(ctx, rolloutID, attemptID, in)
	return err
}

// commitEvents is the store.CommitFunc of s.events: one write transaction
// for a batch of appends.
func (s *Store) commitEvents(ctx context.Context, batch []*store.Append) error {
	var enc *store.EncodeBatch
	err := s.tx(ctx, func(tx wtx) error {
		enc = s.bases.BatchFrom(baseSource{ctx, s.r})
		check, err := tx.stmt(ctx, `SELECT status FROM attempts WHERE id = ? AND rollout_id = ?`)
		if err != nil {
			return fmt.Errorf("sqlite store: prepare: %w", err)
		}
		ins, err := tx.stmt(ctx, `INSERT INTO events (rollout_id, attempt_id, type, time, data) VALUES (?,?,?,?,?)`)
		if err != nil {
			return fmt.Errorf("sqlite store: prepare: %w", err)
		}
		// An attempt's status cannot change inside this transaction: look
		// each attempt up once per batch.
		type seen struct{ rid, aid, status string }
		var known []seen
		for _, a := range batch {
			st, found := "", false
			for _, k := range known {
				if k.rid == a.RolloutID && k.aid == a.AttemptID {
					st, found = k.status, true
					break
				}
			}
			if !found {
				err := check.QueryRowContext(ctx, a.AttemptID, a.RolloutID).Scan(&st)
				if errors.Is(err, sql.ErrNoRows) {
					st = ""
				} else if err != nil {
					return fmt.Errorf("sqlite store: append events: %w", err)
				}
				known = append(known, seen{a.RolloutID, a.AttemptID, st})
			}
			switch st {
			case "":
				a.Err = store.Errorf(store.ErrNotFound, "attempt %q of rollout %q", a.AttemptID, a.RolloutID)
				continue
			case string(store.AttemptRunning):
			default:
				a.Err = store.Errorf(store.ErrConflict, "attempt %s is %s, not running: events are closed", a.AttemptID, st)
				continue
			}
			out := make([]store.Event, len(a.Events))
			for j, e := range a.Events {
				seq, err := s.insertEvent(ctx, ins, enc, a.RolloutID, a.AttemptID, e)
				if err != nil {
					return err
				}
				out[j] = store.Event{Seq: seq, RolloutID: a.RolloutID, AttemptID: a.AttemptID, Type: e.Type, Time: fromTS(ts(e.Time)), Data: e.Data}
			}
			a.Stored = out
		}
		return nil
	})
	if err == nil {
		enc.Commit()
	}
	return err
}

// insertEvent inserts one event in its stored form (store/codec.go) and
// returns its sequence number. An event already in the stored form (one
// replayed from the journal) is inserted as is.
func (s *Store) insertEvent(ctx context.Context, ins *sql.Stmt, enc *store.EncodeBatch, rid, aid string, e store.NewEvent) (int64, error) {
	en := store.Encoding{Data: e.Data}
	if !s.plain && !store.Encoded(e.Data) {
		en = enc.Encode(rid, aid, e)
	}
	return s.insertEncoded(ctx, ins, enc, rid, aid, e, en)
}

// insertEncoded inserts event e stored as en.
func (s *Store) insertEncoded(ctx context.Context, ins *sql.Stmt, enc *store.EncodeBatch, rid, aid string, e store.NewEvent, en store.Encoding) (int64, error) {
	res, err := ins.ExecContext(ctx, rid, aid, e.Type, ts(e.Time), en.Data)
	if err != nil {
		return 0, fmt.Errorf("sqlite store: insert event: %w", err)
	}
	seq, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("sqlite store: event seq: %w", err)
	}
	enc.Stored(rid, aid, en, seq)
	return seq, nil
}

// baseSource reads the bases of calls not cached (store.BaseSource) from
// committed events.
type baseSource struct {
	ctx context.Context
	db  *sql.DB
}

func (b baseSource) RecentCalls(rid, aid string, n int) ([]store.Event, error) {
	rows, err := b.db.QueryContext(b.ctx, `SELECT seq, data FROM events WHERE rollout_id = ? AND attempt_id = ? AND type = ? ORDER BY seq DESC LIMIT ?`,
		rid, aid, store.EventModelRequest, n)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: recent calls: %w", err)
	}
	defer rows.Close()
	var out []store.Event
	for rows.Next() {
		var e store.Event
		var d []byte
		if err := rows.Scan(&e.Seq, &d); err != nil {
			return nil, fmt.Errorf("sqlite store: recent calls: %w", err)
		}
		e.Data = d
		out = append(out, e)
	}
	return out, rows.Err()
}

func (b baseSource) EventData(seq int64) ([]byte, error) {
	var d []byte
	err := b.db.QueryRowContext(b.ctx, `SELECT data FROM events WHERE seq = ?`, seq).Scan(&d)
	return d, err
}

// StoredEventBytes implements store.StoredBytes.
func (s *Store) StoredEventBytes(ctx context.Context, rolloutID, attemptID, eventType string) (int64, error) {
	if s.journal != nil {
		if err := s.journal.flush(ctx); err != nil {
			return 0, err
		}
	}
	var n int64
	err := s.r.QueryRowContext(ctx, `SELECT COALESCE(SUM(length(CAST(data AS BLOB))), 0) FROM events WHERE rollout_id = ? AND attempt_id = ? AND type = ?`,
		rolloutID, attemptID, eventType).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("sqlite store: stored event bytes: %w", err)
	}
	return n, nil
}

// ListEvents implements store.Store.
func (s *Store) ListEvents(ctx context.Context, f store.EventFilter) ([]store.Event, error) {
	if s.journal != nil {
		if err := s.journal.flush(ctx); err != nil {
			return nil, err
		}
	}
	q := `SELECT seq, rollout_id, attempt_id, type, time, data FROM events WHERE rollout_id = ? AND seq > ?`
	args := []any{f.RolloutID, f.AfterSeq}
	if f.AttemptID != "" {
		q += ` AND attempt_id = ?`
		args = append(args, f.AttemptID)
	}
	if len(f.Types) > 0 {
		ph := make([]string, len(f.Types))
		for i, t := range f.Types {
			ph[i] = "?"
			args = append(args, t)
		}
		q += ` AND type IN (` + strings.Join(ph, ",") + `)`
	}
	q += ` ORDER BY seq`
	if f.Desc {
		q += ` DESC`
	}
	if f.Limit > 0 {
		q += fmt.Sprintf(` LIMIT %d`, f.Limit)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: list events: %w", err)
	}
	defer rows.Close()
	out := []store.Event{}
	for rows.Next() {
		var e store.Event
		var t int64
		var d []byte
		if err := rows.Scan(&e.Seq, &e.RolloutID, &e.AttemptID, &e.Type, &t, &d); err != nil {
			return nil, fmt.Errorf("sqlite store: scan event: %w", err)
		}
		e.Time, e.Data = fromTS(t), json.RawMessage(d)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite store: list events: %w", err)
	}
	if f.Desc {
		slices.Reverse(out) // bases decode oldest first
	}
	err = s.bases.DecodeEvents(out, baseSource{ctx, s.r}.EventData)
	if f.Desc {
		slices.Reverse(out)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite store: list events of rollout %s: %w", f.RolloutID, err)
	}
	if len(out) == 0 {
		if _, err := getRollout(ctx, s.r, f.RolloutID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

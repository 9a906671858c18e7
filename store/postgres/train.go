package postgres

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aglrl/agl/store"
)

// putTrainStep is PutTrainStep without telling the Observer.
func (s *Store) putTrainStep(ctx context.Context, t store.TrainStep) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := t.Validate(); err != nil {
		return err
	}
	if t.Time.IsZero() {
		t.Time = now()
	}
	err := s.retry(func() error {
		_, err := s.pool.Exec(ctx, `INSERT INTO train_steps (run, mode, step, time, metrics) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (run, mode, step) DO UPDATE SET time = excluded.time, metrics = excluded.metrics`,
			t.Run, string(t.Mode), t.Step, norm(t.Time), []byte(t.Metrics))
		return err
	})
	return dbErr("put train step", err)
}

// ListTrainSteps lists recorded steps by run, mode and step.
func (s *Store) ListTrainSteps(ctx context.Context, run string) ([]store.TrainStep, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT run, mode, step, time, metrics FROM train_steps
		WHERE $1 = '' OR run = $1 ORDER BY run, mode, step`, run)
	if err != nil {
		return nil, dbErr("list train steps", err)
	}
	defer rows.Close()
	out := []store.TrainStep{}
	for rows.Next() {
		var t store.TrainStep
		var mode string
		var m []byte
		if err := rows.Scan(&t.Run, &mode, &t.Step, &t.Time, &m); err != nil {
			return nil, dbErr("list train steps", err)
		}
		t.Mode, t.Time, t.Metrics = store.Mode(mode), t.Time.UTC(), json.RawMessage(m)
		out = append(out, t)
	}
	return out, dbErr("list train steps", rows.Err())
}

// Workers summarises workers with an attempt running now or started since:
// recent attempts from the index attempts_started, running ones (few) for
// their heartbeats, in one snapshot.
func (s *Store) Workers(ctx context.Context, since time.Time) ([]store.Worker, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	byID := map[string]*store.Worker{}
	get := func(id string) *store.Worker {
		w := byID[id]
		if w == nil {
			w = &store.Worker{ID: id}
			byID[id] = w
		}
		return w
	}
	opts := pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
	err := pgx.BeginTxFunc(ctx, s.pool, opts, func(tx pgx.Tx) error {
		clear(byID)
		rows, err := tx.Query(ctx, `SELECT worker_id, count(*), count(*) FILTER (WHERE status NOT IN ('running', 'succeeded')), max(started_at)
			FROM attempts WHERE started_at >= $1 GROUP BY worker_id`, norm(since))
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			var n, failed int64
			var last time.Time
			if err := rows.Scan(&id, &n, &failed, &last); err != nil {
				rows.Close()
				return err
			}
			w := get(id)
			w.Attempts, w.Failed, w.LastSeen = int(n), int(failed), last.UTC()
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT worker_id, count(*), count(*) FILTER (WHERE started_at < $1), max(last_heartbeat)
			FROM attempts WHERE status = 'running' GROUP BY worker_id`, norm(since))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var n, older int64
			var hb time.Time
			if err := rows.Scan(&id, &n, &older, &hb); err != nil {
				return err
			}
			w := get(id)
			w.Running, w.Attempts = int(n), w.Attempts+int(older)
			if hb.After(w.LastSeen) {
				w.LastSeen = hb.UTC()
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, dbErr("workers", err)
	}
	return store.SortWorkers(byID), nil
}

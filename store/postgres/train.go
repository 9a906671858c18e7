package postgres

import (
	"context"
	"encoding/json"
	"time"

	"github.com/aglrl/agl/store"
)

// PutTrainStep records a trainer step's metrics, replacing an earlier
// report of the same (run, mode, step).
func (s *Store) PutTrainStep(ctx context.Context, t store.TrainStep) error {
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

// Workers summarises workers with an attempt running now or started since.
func (s *Store) Workers(ctx context.Context, since time.Time) ([]store.Worker, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT worker_id, count(*) FILTER (WHERE status = 'running'), count(*),
		count(*) FILTER (WHERE status NOT IN ('running', 'succeeded')), greatest(max(last_heartbeat), max(started_at))
		FROM attempts WHERE started_at >= $1 OR status = 'running' GROUP BY worker_id ORDER BY worker_id`, norm(since))
	if err != nil {
		return nil, dbErr("workers", err)
	}
	defer rows.Close()
	out := []store.Worker{}
	for rows.Next() {
		var w store.Worker
		var running, attempts, failed int64
		if err := rows.Scan(&w.ID, &running, &attempts, &failed, &w.LastSeen); err != nil {
			return nil, dbErr("workers", err)
		}
		w.Running, w.Attempts, w.Failed, w.LastSeen = int(running), int(attempts), int(failed), w.LastSeen.UTC()
		out = append(out, w)
	}
	return out, dbErr("workers", rows.Err())
}

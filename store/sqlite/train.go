package sqlite

import (
	"context"
	"encoding/json"
	"fmt"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/aglrl/agl/store"
)

// putTrainStep is PutTrainStep without telling the Observer.
func (s *Store) putTrainStep(ctx context.Context, t store.TrainStep) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if t.Time.IsZero() {
		t.Time = now()
	}
	return s.tx(ctx, func(tx wtx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO train_steps (run, mode, step, time, metrics) VALUES (?,?,?,?,?)
			ON CONFLICT (run, mode, step) DO UPDATE SET time = excluded.time, metrics = excluded.metrics`,
			t.Run, string(t.Mode), t.Step, ts(t.Time), []byte(t.Metrics)); err != nil {
			return fmt.Errorf("sqlite store: put train step: %w", err)
		}
		return nil
	})
}

// ListTrainSteps implements store.Store.
func (s *Store) ListTrainSteps(ctx context.Context, run string) ([]store.TrainStep, error) {
	q := `SELECT run, mode, step, time, metrics FROM train_steps`
	args := []any{}
	if run != "" {
		q += ` WHERE run = ?`
		args = append(args, run)
	}
	q += ` ORDER BY run, mode, step`
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: list train steps: %w", err)
	}
	defer rows.Close()
	out := []store.TrainStep{}
	for rows.Next() {
		var t store.TrainStep
		var mode string
		var tm int64
		var m []byte
		if err := rows.Scan(&t.Run, &mode, &t.Step, &tm, &m); err != nil {
			return nil, fmt.Errorf("sqlite store: scan train step: %w", err)
		}
		t.Mode, t.Time, t.Metrics = store.Mode(mode), fromTS(tm), json.RawMessage(m)
		out = append(out, t)
	}
	return out, rows.Err()
}

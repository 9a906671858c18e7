package sqlite

import (
	"context"
	"time"

	"github.com/aglrl/agl/store"
)

// The writes an Observer hears of (Options.Observer), told once they
// succeeded.

// AppendLateEvents implements store.LateWriter.
func (s *Store) AppendLateEvents(ctx context.Context, rolloutID, attemptID string, evs []store.NewEvent) ([]store.Event, error) {
	out, err := s.appendLateEvents(ctx, rolloutID, attemptID, evs)
	if err == nil && s.obs != nil {
		s.obs.EventsStored(evs)
	}
	return out, err
}

// Reap ends attempts that stopped heart-beating or ran past their
// rollout's timeout.
func (s *Store) Reap(ctx context.Context, at time.Time) (store.ReapResult, error) {
	r, err := s.reap(ctx, at)
	if err == nil && s.obs != nil {
		s.obs.Reaped(r)
	}
	return r, err
}

// PutTrainStep records a trainer step's metrics, replacing an earlier
// report of the same (run, mode, step).
func (s *Store) PutTrainStep(ctx context.Context, t store.TrainStep) error {
	err := s.putTrainStep(ctx, t)
	if err == nil && s.obs != nil {
		s.obs.TrainStepStored(t)
	}
	return err
}

package samples

import (
	"context"
	"fmt"

	"github.com/aglrl/agl/store"
)

// Source is what Load reads: a store.Store, or a gateway's API
// (api.Source).
type Source interface {
	Terminal(ctx context.Context, after int64, limit int) ([]store.Rollout, error)
	GetRollout(ctx context.Context, id string) (store.Rollout, error)
	ListEvents(ctx context.Context, f store.EventFilter) ([]store.Event, error)
}

// Load reads terminal rollouts from a store (or a gateway), in the order they became
// terminal, starting after the cursor after (a TerminalSeq; 0 from the
// start), at most limit of them (0: all). Each rollout comes with its
// attempts (for FinalAttempt) and its "model_request" and "reward" events.
// next is the cursor to continue from (after when nothing was read).
func Load(ctx context.Context, st Source, after int64, limit int) (rs []store.Rollout, events map[string][]store.Event, next int64, err error) {
	const page = 256
	events = map[string][]store.Event{}
	next = after
	for limit <= 0 || len(rs) < limit {
		n := page
		if limit > 0 {
			n = min(page, limit-len(rs))
		}
		batch, err := st.Terminal(ctx, next, n)
		if err != nil {
			return nil, nil, after, fmt.Errorf("samples: load terminal rollouts after %d: %w", next, err)
		}
		for _, r := range batch {
			full, err := st.GetRollout(ctx, r.ID)
			if err != nil {
				return nil, nil, after, fmt.Errorf("samples: load rollout %s: %w", r.ID, err)
			}
			evs, err := st.ListEvents(ctx, store.EventFilter{RolloutID: r.ID, Types: []string{store.EventModelRequest, store.EventReward}})
			if err != nil {
				return nil, nil, after, fmt.Errorf("samples: load events of %s: %w", r.ID, err)
			}
			rs = append(rs, full)
			events[r.ID] = evs
			next = max(next, r.TerminalSeq)
		}
		if len(batch) < n {
			break
		}
	}
	return rs, events, next, nil
}

package proxy

import (
	"context"
	"net/http"
	"sync"

	"github.com/aglrl/agl/engine"
	"github.com/aglrl/agl/internal/seed"
)

// seeds holds, per attempt, the base of its calls' sampling seeds and how
// many calls each agent has made so far.
type seeds struct {
	mu sync.Mutex
	m  map[Target]*attemptSeeds
}

type attemptSeeds struct {
	base  uint64 // 0: the rollout is unseeded
	calls map[string]uint64
}

// seedCall gives a call that names no seed of its own (Sampling.Seed 0) the
// seed Mix(rollout seed, attempt number, agent, n) when RolloutSeeds is on
// and its rollout's metadata has a seed, n counting the agent's earlier
// calls of the attempt. A retried attempt samples afresh; a harness that
// calls sequentially gets the same seeds in every run.
func (p *Proxy) seedCall(ctx context.Context, c *call) *apiError {
	if !p.cfg.RolloutSeeds {
		return nil
	}
	var s *engine.Sampling
	switch {
	case c.chat != nil:
		s = &c.chat.Sampling
	case c.complete != nil:
		s = &c.complete.Sampling
	default:
		return nil
	}
	if s.Seed != 0 {
		return nil
	}
	t := c.target
	p.seeds.mu.Lock()
	a := p.seeds.m[t.attempt()]
	p.seeds.mu.Unlock()
	if a == nil {
		ro, err := p.st.GetRollout(ctx, t.RolloutID)
		if err != nil {
			return &apiError{Status: http.StatusInternalServerError, Message: "rollout seed: " + err.Error()}
		}
		a = &attemptSeeds{calls: map[string]uint64{}}
		if rs := seed.FromMetadata(ro.Metadata); rs != 0 {
			for _, at := range ro.Attempts {
				if at.ID == t.AttemptID {
					a.base = seed.Mix(rs, uint64(at.Number))
				}
			}
		}
		p.seeds.mu.Lock()
		if p.seeds.m == nil || len(p.seeds.m) >= 1<<16 {
			p.seeds.m = map[Target]*attemptSeeds{}
		}
		if prev := p.seeds.m[t.attempt()]; prev != nil {
			a = prev // a concurrent first call got there first
		} else {
			p.seeds.m[t.attempt()] = a
		}
		p.seeds.mu.Unlock()
	}
	if a.base == 0 {
		return nil
	}
	p.seeds.mu.Lock()
	n := a.calls[t.Agent]
	a.calls[t.Agent] = n + 1
	p.seeds.mu.Unlock()
	s.Seed = seed.Mix(a.base, seed.String(t.Agent), n)
	return nil
}

// forget drops an ended attempt's seeds.
func (s *seeds) forget(t Target) {
	s.mu.Lock()
	delete(s.m, t.attempt())
	s.mu.Unlock()
}

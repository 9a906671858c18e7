package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"

	"github.com/aglrl/agl/samples"
	"github.com/aglrl/agl/store"
)

// Policy is one trained policy as the loop drives it: the embedded GoMLX
// model is one implementation (package trainer/embedded), a remote trainer
// can be another. Loading the weights and serving them (generation) are
// the implementation's own business, done before the loop starts; the loop
// only steps, publishes and checkpoints.
type Policy interface {
	// Step takes one policy update on ss: the samples of this policy's
	// agents only, advantages and weights already set.
	Step(ctx context.Context, ss []samples.Sample) (StepStats, error)
	// Publish makes the updated weights the served ones, as version.
	Publish(ctx context.Context, version int64) error
	// SaveCheckpoint writes what an exact resume needs (weights and
	// optimizer state) into dir, which it creates.
	SaveCheckpoint(dir string) error
}

// StepStats describes one policy update. Entropy, ClipFrac and ApproxKL
// are token means over the trained tokens (Tokens); loss alone is ~0 at
// ratio 1.
type StepStats struct {
	Loss, GradNorm              float64
	Entropy, ClipFrac, ApproxKL float64
	Tokens                      int
}

// TrainedPolicy is a policy the loop trains and the agents whose calls it
// trains on.
type TrainedPolicy struct {
	// Name is the policy's model name: its versions are registered under
	// it, and a named policy's checkpoint lives in PolicyDir(Name).
	Name string
	// Agents lists the agents it trains on ("" the default agent); nil
	// (only for a run's single policy) means every agent not excluded by
	// trainer.train_agents.
	Agents []string
	// Named is false for the run's single unnamed policy (the engine
	// section's model), whose checkpoint is the checkpoint dir itself.
	Named  bool
	Policy Policy
	// Distill, when set, is its on-policy distillation from a teacher
	// (trainer.distill).
	Distill *Distill
}

// PolicyDir is where a named policy's checkpoint lives inside the
// checkpoint dir.
func PolicyDir(name string) string { return filepath.Join("policies", name) }

// checkPolicies refuses a set of policies the loop cannot train: none, two
// with one name or one agent, or an unnamed one beside others.
func checkPolicies(ps []TrainedPolicy) error {
	if len(ps) == 0 {
		return fmt.Errorf("trainer: no policy to train")
	}
	names := map[string]bool{}
	agents := map[string]string{}
	for _, p := range ps {
		if p.Policy == nil {
			return fmt.Errorf("trainer: policy %q has no implementation", p.Name)
		}
		if p.Distill != nil && p.Distill.Score == nil {
			return fmt.Errorf("trainer: policy %q: its teacher %q has no scorer", p.Name, p.Distill.Teacher)
		}
		if !p.Named && len(ps) > 1 {
			return fmt.Errorf("trainer: an unnamed policy trains alone")
		}
		if p.Named && len(p.Agents) == 0 {
			return fmt.Errorf("trainer: policy %q lists no agents", p.Name)
		}
		if names[p.Name] {
			return fmt.Errorf("trainer: two policies named %q", p.Name)
		}
		names[p.Name] = true
		for _, a := range p.Agents {
			if o, ok := agents[a]; ok {
				return fmt.Errorf("trainer: agent %q is in policies %q and %q", a, o, p.Name)
			}
			agents[a] = p.Name
		}
	}
	return nil
}

// agentsOf is the train_agents filter of policy p's samples.
func (c Config) agentsOf(p TrainedPolicy) []string {
	if p.Named {
		return slices.Clone(p.Agents)
	}
	return c.TrainAgents
}

// named reports whether the loop trains named policies (each with its
// own version in State.Versions).
func (l *Loop) named() bool { return l.pols[0].Named }

// stepPolicy builds policy p's samples of step s (its agents' calls only;
// advantages normalised within the group over those calls), takes its
// update, publishes and registers its next version, and adds its part to
// m. It reports whether p published.
func (l *Loop) stepPolicy(ctx context.Context, s int, p TrainedPolicy, done []store.Rollout, events map[string][]store.Event, m *StepMetrics) (bool, error) {
	version := l.state.version(p)
	scfg := l.cfg.samplesConfig()
	scfg.TrainAgents = l.cfg.agentsOf(p)
	scfg.Staleness = samples.StalenessConfig{Current: version, Max: int64(l.cfg.MaxStaleness),
		Keep: l.cfg.OnStale == StaleKeep}
	if p.Distill != nil {
		// A group whose rewards are all equal still carries the teacher's
		// signal.
		scfg.Advantage.DropZeroVariance = false
	}
	res, err := samples.FromRollouts(done, events, scfg)
	if err != nil {
		return false, err
	}
	var distillKL *float64
	if p.Distill != nil && len(res.Samples) > 0 {
		ds, err := p.Distill.apply(ctx, res.Samples)
		if err != nil {
			return false, fmt.Errorf("policy %s: distillation from teacher %s: %w", p.Name, p.Distill.Teacher, err)
		}
		distillKL = &ds.ReverseKL
		// Token-weighted over the distilled policies.
		if m.DistillKL == nil {
			m.DistillKL, m.distillTokens = new(float64), 0
		}
		n := m.distillTokens + ds.Tokens
		if n > 0 {
			*m.DistillKL = (*m.DistillKL*float64(m.distillTokens) + ds.ReverseKL*float64(ds.Tokens)) / float64(n)
		}
		m.distillTokens = n
	}
	st := res.Stats
	// Token-weighted means over the policies (one policy: its own).
	prevSamples, prevTokens := m.Samples, m.TrainedTokens
	m.Samples, m.Tokens, m.TrainedTokens = m.Samples+st.Samples, m.Tokens+st.Tokens, m.TrainedTokens+st.TrainedTokens
	for a, n := range st.TrainedByAgent {
		if m.TrainedByAgent == nil {
			m.TrainedByAgent = map[string]int{}
		}
		m.TrainedByAgent[a] += n
	}
	// Duplicates are found before the agent filter: the same for every policy.
	m.DuplicateCalls = max(m.DuplicateCalls, st.Duplicates)
	// Groups and dropped groups are counted per policy (its own agents' samples).
	m.Groups += st.Groups.Groups
	m.DroppedGroups += st.Groups.Dropped
	if st.Rollouts > 0 {
		m.LengthPenalty = st.LengthPenalty / float64(st.Rollouts)
	}
	if m.Samples > 0 {
		m.StalenessMean = (m.StalenessMean*float64(prevSamples) + st.StalenessMean*float64(st.Samples)) / float64(m.Samples)
	}
	m.StalenessMax = max(m.StalenessMax, st.StalenessMax)
	m.StaleGroups, m.StaleSamples = m.StaleGroups+st.StaleGroups, m.StaleSamples+st.StaleSamples
	recordAdvantages(m, res.Samples)
	if len(res.Samples) == 0 {
		if p.Named {
			l.policyMetrics(m, p, PolicyMetrics{Version: version})
		}
		return false, nil
	}
	u, err := p.Policy.Step(ctx, res.Samples)
	if err != nil {
		return false, fmt.Errorf("policy %s: %w", p.Name, err)
	}
	m.Loss += u.Loss
	m.GradNorm = math.Sqrt(m.GradNorm*m.GradNorm + u.GradNorm*u.GradNorm) // the norm of the joint gradient
	if m.TrainedTokens > 0 {
		a, b := float64(prevTokens), float64(st.TrainedTokens)
		mean := func(x, y float64) float64 { return (x*a + y*b) / (a + b) }
		m.Entropy, m.ClipFrac, m.ApproxKL = mean(m.Entropy, u.Entropy), mean(m.ClipFrac, u.ClipFrac), mean(m.ApproxKL, u.ApproxKL)
	}
	version++
	if err := p.Policy.Publish(ctx, version); err != nil {
		return false, fmt.Errorf("publish policy %s: %w", p.Name, err)
	}
	if p.Named {
		if l.state.Versions == nil {
			l.state.Versions = map[string]int64{}
		}
		l.state.Versions[p.Name] = version
		l.policyMetrics(m, p, PolicyMetrics{Version: version, Samples: st.Samples, TrainedTokens: st.TrainedTokens,
			Loss: u.Loss, GradNorm: u.GradNorm, Entropy: u.Entropy, ClipFrac: u.ClipFrac, ApproxKL: u.ApproxKL, DistillKL: distillKL})
	} else {
		l.state.Version = version
	}
	if _, err := l.st.RegisterModel(ctx, store.Model{Name: p.Name, Version: version,
		Metadata: json.RawMessage(fmt.Sprintf(`{"step":%d}`, s))}); err != nil && !errors.Is(err, store.ErrConflict) {
		return true, err
	}
	return true, nil
}

func (l *Loop) policyMetrics(m *StepMetrics, p TrainedPolicy, pm PolicyMetrics) {
	if m.Policies == nil {
		m.Policies = map[string]PolicyMetrics{}
	}
	m.Policies[p.Name] = pm
}

// PolicyVersion is named policy name's served version in state (1 before
// its first update).
func PolicyVersion(state State, name string) int64 {
	return state.version(TrainedPolicy{Name: name, Named: true})
}

// recordAdvantages adds the advantage of each call of ss with a trained
// token to m.Advantages: its RL advantage, plus the mean of its trained
// tokens' distillation advantages when distilled.
func recordAdvantages(m *StepMetrics, ss []samples.Sample) {
	for i := range ss {
		s := &ss[i]
		for k, id := range s.CallIDs {
			if k >= len(s.CallSpans) {
				break
			}
			sp, trained := s.CallSpans[k], 0
			var distill float64
			for j := sp[0]; j < sp[1] && j < len(s.LossMask); j++ {
				if s.LossMask[j] != 0 {
					trained++
					if len(s.DistillAdvantages) == len(s.LossMask) {
						distill += s.DistillAdvantages[j]
					}
				}
			}
			if trained == 0 {
				continue
			}
			a := s.Advantage
			if len(s.CallAdvantages) == len(s.CallIDs) {
				a = s.CallAdvantages[k]
			}
			a += distill / float64(trained)
			if m.Advantages == nil {
				m.Advantages = map[string]map[string]float64{}
			}
			if m.Advantages[s.RolloutID] == nil {
				m.Advantages[s.RolloutID] = map[string]float64{}
			}
			m.Advantages[s.RolloutID][id] = a
		}
	}
}

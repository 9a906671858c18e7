// Package embedded is the trainer.Policy of the embedded GoMLX model: a
// model.Trainer (weights and AdamW state) stepped on samples in
// micro-batches, published by swapping the new weights into the engine
// that serves the policy.
package embedded

import (
	"context"
	"fmt"

	"github.com/aglrl/agl/model"
	"github.com/aglrl/agl/samples"
	"github.com/aglrl/agl/trainer"
)

// Publisher makes new weights the served ones (e.g. pause the LLM routes,
// drain, swap the engine's weights, resume).
type Publisher interface {
	Publish(ctx context.Context, w *model.Weights, version int64) error
}

// Trainer is what a step needs of the weights being trained
// (*model.Trainer).
type Trainer interface {
	AccumulatePolicy(ctx context.Context, b *model.Batch, lc model.PolicyLossConfig) (model.StepStats, error)
	ApplyGradients(ctx context.Context) (model.StepStats, error)
	LogProbs(ctx context.Context, seqs [][]int32) (logp, entropy [][]float32, err error)
	Weights() (*model.Weights, error)
	SaveCheckpoint(dir string) error
}

// Options are a step's loss and batching settings.
type Options struct {
	Loss model.PolicyLossConfig
	// MicroBatchTokens bounds one forward/backward pass (default 4096).
	MicroBatchTokens int
	// Epochs is the number of optimizer updates per step over the same
	// samples (PPO epochs; default 1).
	Epochs int
}

// OptionsFrom maps the `trainer:` section to a step's options, with the
// section's defaults filled in (an unset clip_low / clip_high is 0.2 /
// 0.28, not a clip of zero).
func OptionsFrom(c trainer.Config) Options {
	c = c.WithDefaults()
	return Options{
		Loss: model.PolicyLossConfig{ClipLow: c.ClipLow, ClipHigh: c.ClipHigh, DualClip: c.DualClip, TISCap: c.TISCap,
			KLCoef: c.KLCoef, KLK1: c.KLK1, EntropyCoef: c.EntropyCoef},
		MicroBatchTokens: c.MicroBatchTokens, Epochs: c.PPOEpochs,
	}
}

// Reference computes the log-probs of the reference policy of a KL
// penalty (the weights a run started from).
type Reference func(ctx context.Context, seqs [][]int32) ([][]float32, error)

// NewReference serves the log-probs of weights w on model m (uploaded
// once; the reference never changes).
func NewReference(m *model.Model, w *model.Weights) (Reference, error) {
	d, err := m.Upload(w)
	if err != nil {
		return nil, fmt.Errorf("reference weights: %w", err)
	}
	return func(ctx context.Context, seqs [][]int32) ([][]float32, error) {
		lp, _, err := m.LogProbs(ctx, d, seqs)
		return lp, err
	}, nil
}

// Policy is one embedded trained policy.
type Policy struct {
	tr  Trainer
	pub Publisher
	ref Reference
	o   Options
}

// New returns the policy training tr and publishing through pub. ref is
// needed (and only used) when o.Loss.KLCoef > 0.
func New(tr Trainer, pub Publisher, ref Reference, o Options) (*Policy, error) {
	if o.MicroBatchTokens <= 0 {
		o.MicroBatchTokens = 4096
	}
	if o.Epochs <= 0 {
		o.Epochs = 1
	}
	if o.Loss.KLCoef > 0 && ref == nil {
		return nil, fmt.Errorf("embedded policy: kl_coef %v needs reference weights", o.Loss.KLCoef)
	}
	return &Policy{tr: tr, pub: pub, ref: ref, o: o}, nil
}

// Step implements trainer.Policy: Epochs updates, each over all samples in
// micro-batches (gradients accumulated, one optimizer update per epoch).
// π_old (TIS) and the reference log-probs are computed once, before the
// first update; the stats are those of the last epoch.
func (p *Policy) Step(ctx context.Context, ss []samples.Sample) (trainer.StepStats, error) {
	packed, _ := samples.Pack(ss, p.o.MicroBatchTokens, 0)
	batches := make([]*model.Batch, 0, len(packed))
	for _, b := range packed {
		mb := &model.Batch{}
		for _, s := range b.Samples {
			mask := make([]float32, len(s.LossMask))
			for i, v := range s.LossMask {
				mask[i] = float32(v)
			}
			mb.IDs = append(mb.IDs, s.IDs)
			mb.Weights = append(mb.Weights, s.Weights)
			mb.Mask = append(mb.Mask, mask)
			mb.Behavior = append(mb.Behavior, s.Logprobs)
			mb.Advantages = append(mb.Advantages, s.TokenAdvantages())
		}
		if p.o.Loss.TISCap > 0 {
			// π_old: the weights this step starts from, so the clip acts
			// around them and the importance weight min(π_old/μ, C)
			// carries the staleness.
			old, _, err := p.tr.LogProbs(ctx, mb.IDs)
			if err != nil {
				return trainer.StepStats{}, err
			}
			mb.OldLogp = old
		}
		if p.o.Loss.KLCoef > 0 {
			ref, err := p.ref(ctx, mb.IDs)
			if err != nil {
				return trainer.StepStats{}, fmt.Errorf("reference log-probs: %w", err)
			}
			mb.RefLogp = ref
		}
		batches = append(batches, mb)
	}
	var total trainer.StepStats
	for e := 0; e < p.o.Epochs; e++ {
		total = trainer.StepStats{}
		for _, mb := range batches {
			st, err := p.tr.AccumulatePolicy(ctx, mb, p.o.Loss)
			if err != nil {
				return total, err
			}
			total.Loss += st.Loss
			// Token-weighted means over the micro-batches.
			w := float64(st.Tokens)
			total.Entropy += w * st.EntropyMean
			total.ClipFrac += w * st.ClipFrac
			total.ApproxKL += w * st.ApproxKL
			total.Tokens += st.Tokens
		}
		if total.Tokens > 0 {
			w := float64(total.Tokens)
			total.Entropy, total.ClipFrac, total.ApproxKL = total.Entropy/w, total.ClipFrac/w, total.ApproxKL/w
		}
		st, err := p.tr.ApplyGradients(ctx)
		if err != nil {
			return total, err
		}
		total.GradNorm = st.GradNorm
	}
	return total, nil
}

// Publish implements trainer.Policy.
func (p *Policy) Publish(ctx context.Context, version int64) error {
	w, err := p.tr.Weights()
	if err != nil {
		return err
	}
	return p.pub.Publish(ctx, w, version)
}

// SaveCheckpoint implements trainer.Policy.
func (p *Policy) SaveCheckpoint(dir string) error { return p.tr.SaveCheckpoint(dir) }

package model

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Example is one supervised sequence: ids and which tokens carry the loss
// (the assistant's tokens).
type Example struct {
	IDs  []int32
	Mask []bool
}

// Trained reports whether any token after the first carries the loss (a
// reply to learn, or to evaluate).
func (ex Example) Trained() bool {
	return len(ex.Mask) > 1 && slices.Contains(ex.Mask[1:], true)
}

// SFTOptions configure SFT.
type SFTOptions struct {
	// Epochs over the examples (default 1); Steps, when > 0, overrides it.
	Epochs, Steps int
	// BatchSize is the number of sequences per step (default 8).
	BatchSize int
	// Seed orders the examples.
	Seed uint64
	// WarmupSteps ramps the learning rate linearly from 0.
	WarmupSteps int
	// LR is the learning rate after the warmup (required).
	LR float64
}

// SFTStepper takes SFT's optimizer steps: the embedded *Trainer, or a
// model on a training service (trainer/tinker's Policy).
type SFTStepper interface {
	// SFTStep takes one step on the weighted cross-entropy
	// −Σ w_t·log p(token t) of b at learning rate lr and returns the loss.
	SFTStep(ctx context.Context, b *Batch, lr float64) (loss float64, err error)
}

// SFTProgress is reported after every step.
type SFTProgress struct {
	Step, Steps  int
	Epoch        int
	Loss         float64 // mean loss per trained token of this step's batch
	Tokens       int     // trained tokens so far
	SeqTokens    int     // all tokens processed so far
	Elapsed      time.Duration
	TokensPerSec float64 // all tokens processed per second
}

// SFT trains with the cross-entropy of the masked tokens, each batch's loss
// being the mean over its masked tokens. progress (optional) is called
// after each step.
func SFT(ctx context.Context, tr SFTStepper, examples []Example, o SFTOptions, progress func(SFTProgress)) (SFTProgress, error) {
	var usable []Example
	for _, ex := range examples {
		if len(ex.IDs) != len(ex.Mask) {
			return SFTProgress{}, fmt.Errorf("model: sft: example with %d ids and %d mask values", len(ex.IDs), len(ex.Mask))
		}
		if ex.Trained() {
			usable = append(usable, ex)
		}
	}
	if len(usable) == 0 {
		return SFTProgress{}, errors.New("model: sft: no example has trained tokens")
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 8
	}
	if o.Epochs <= 0 {
		o.Epochs = 1
	}
	perEpoch := (len(usable) + o.BatchSize - 1) / o.BatchSize
	steps := o.Steps
	if steps <= 0 {
		steps = o.Epochs * perEpoch
	}
	if !(o.LR > 0) {
		return SFTProgress{}, fmt.Errorf("model: sft: learning rate %v: want > 0", o.LR)
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x5f7))
	order := rng.Perm(len(usable))
	start := time.Now()
	var p SFTProgress
	p.Steps = steps
	for step := 0; step < steps; step++ {
		if err := ctx.Err(); err != nil {
			return p, err
		}
		k := step % perEpoch
		if k == 0 && step > 0 {
			order = rng.Perm(len(usable))
		}
		b := &Batch{}
		n := 0
		for _, i := range order[k*o.BatchSize : min((k+1)*o.BatchSize, len(order))] {
			ex := usable[i]
			w := make([]float32, len(ex.IDs))
			for t := 1; t < len(w); t++ {
				if ex.Mask[t] {
					w[t] = 1
					n++
				}
			}
			b.IDs = append(b.IDs, ex.IDs)
			b.Weights = append(b.Weights, w)
			p.SeqTokens += len(ex.IDs)
		}
		for _, w := range b.Weights {
			for t := range w {
				w[t] /= float32(n)
			}
		}
		lr := o.LR
		if o.WarmupSteps > 0 && step < o.WarmupSteps {
			lr = o.LR * float64(step+1) / float64(o.WarmupSteps)
		}
		loss, err := tr.SFTStep(ctx, b, lr)
		if err != nil {
			return p, err
		}
		p.Step, p.Epoch = step+1, step/perEpoch+1
		p.Loss = loss
		p.Tokens += n
		p.Elapsed = time.Since(start)
		p.TokensPerSec = float64(p.SeqTokens) / p.Elapsed.Seconds()
		if progress != nil {
			progress(p)
		}
	}
	return p, nil
}

// Preset returns a named model size for from-scratch training with the
// given vocabulary: "tiny" (≈0.1M parameters), "1m" (≈0.8M), "10m"
// (≈10M), "30m" (≈30M). All are Qwen3-style with tied embeddings.
func Preset(name string, vocab int) (Config, error) {
	c := Config{Architectures: []string{"Qwen3ForCausalLM"}, ModelType: TypeQwen3, VocabSize: vocab,
		RMSNormEps: 1e-6, RopeTheta: 10000, MaxPositionEmbeddings: 2048, TieWordEmbeddings: true}
	switch name {
	case "tiny":
		c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 32, 64, 2, 4, 2, 8
	case "1m":
		c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 128, 384, 4, 4, 2, 32
	case "10m":
		c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 384, 1152, 6, 6, 2, 64
	case "30m":
		c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 512, 1536, 8, 8, 4, 64
	default:
		return c, fmt.Errorf("model: unknown preset %q (tiny, 1m, 10m, 30m)", name)
	}
	return c, c.Validate()
}

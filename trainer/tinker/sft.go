package tinker

import (
	"context"
	"errors"

	"github.com/aglrl/agl/model"
	"github.com/aglrl/agl/samples"
)

// SFTStep implements model.SFTStepper for a policy whose loss is
// cross_entropy (agl sft): b's sequences become cross_entropy datums
// whose weights are b's per-token weights (already the batch mean's
// 1/N, so the service's per-token SUM is the embedded SFT's loss), sent
// over forward_backward calls of at most MicroBatchTokens, then one
// optim_step at learning rate lr. It returns the service's loss:sum.
func (p *Policy) SFTStep(ctx context.Context, b *model.Batch, lr float64) (float64, error) {
	if p.o.Loss != LossCrossEntropy {
		return 0, errors.New("tinker policy: SFT needs loss cross_entropy")
	}
	ss := make([]samples.Sample, len(b.IDs))
	for i, ids := range b.IDs {
		w := b.Weights[i]
		mask := make([]uint8, len(ids))
		for t := range mask {
			if w[t] != 0 {
				mask[t] = 1
			}
		}
		ss[i] = samples.Sample{IDs: ids, LossMask: mask, Weights: w, Logprobs: make([]float32, len(ids))}
	}
	p.o.Adam.LearningRate = lr
	st, err := p.Step(ctx, ss)
	return st.Loss, err
}

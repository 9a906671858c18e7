package tinkertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/aglrl/agl/engine"
	"github.com/aglrl/agl/model"
)

// Transformer is the stand-in's model when it serves an embedded model
// directory (NewTransformer): the GoMLX transformer of the model package,
// trained in full (the stand-in's "LoRA"). The stand-in computes Tinker's
// losses from its log-probs; the gradient of a loss L reaches the weights
// through the weighted cross-entropy −Σ w_t·log p_t with w_t = −∂L/∂log p_t
// (model.Trainer.AccumulateSFT), which has L's gradient at the current
// weights, and optim_step is model.Trainer.ApplyGradients with the
// request's Adam parameters. Sampling is model.Engine on the saved
// weights (batched across concurrent requests).
type Transformer struct {
	tmp  string // checkpoints of save_weights
	cfg  model.Config
	tm   *model.Model // training graph
	gm   *model.Model // generation graph
	tr   *model.Trainer
	accN int
}

// transformerSnap is saved weights: the sampler's weights and, for
// load_weights, a checkpoint with the optimizer state.
type transformerSnap struct {
	w    *model.Weights
	ckpt string
	gm   *model.Model
	opts model.EngineOptions

	once sync.Once
	eng  *model.Engine
	err  error
}

// newTransformer loads the model directory dir as a fresh trainable model.
func newTransformer(dir, tmp string) (*Transformer, error) {
	w, err := model.Load(dir)
	if err != nil {
		return nil, err
	}
	tm, err := model.New(w.Config, model.TrainBackend(""))
	if err != nil {
		return nil, err
	}
	gm, err := model.New(w.Config, "")
	if err != nil {
		return nil, err
	}
	tr, err := model.NewTrainer(tm, w, model.DefaultAdamW())
	if err != nil {
		return nil, err
	}
	return &Transformer{tmp: tmp, cfg: w.Config, tm: tm, gm: gm, tr: tr}, nil
}

func (m *Transformer) vocab() int { return m.cfg.VocabSize }

func seqs(tokens, targets [][]int32) [][]int32 {
	out := make([][]int32, len(tokens))
	for i, t := range tokens {
		out[i] = append(append(make([]int32, 0, len(t)+1), t...), targets[i][len(targets[i])-1])
	}
	return out
}

func (m *Transformer) logprobs(ctx context.Context, tokens, targets [][]int32) ([][]float64, error) {
	lp, _, err := m.tr.LogProbs(ctx, seqs(tokens, targets))
	if err != nil {
		return nil, err
	}
	out := make([][]float64, len(tokens))
	for i := range tokens {
		out[i] = make([]float64, len(tokens[i]))
		for t := range out[i] {
			out[i][t] = float64(lp[i][t+1]) // log p(seq[t+1] | seq[:t+1])
		}
	}
	return out, nil
}

func (m *Transformer) backward(ctx context.Context, tokens, targets [][]int32, dlogp [][]float64) error {
	b := &model.Batch{IDs: seqs(tokens, targets)}
	for _, g := range dlogp {
		w := make([]float32, len(g)+1)
		for t, x := range g {
			w[t+1] = float32(-x)
		}
		b.Weights = append(b.Weights, w)
	}
	if _, err := m.tr.AccumulateSFT(ctx, b); err != nil {
		return err
	}
	m.accN++
	return nil
}

func (m *Transformer) step(ctx context.Context, a Adam) (float64, error) {
	m.tr.Opt = model.AdamW{LR: a.LearningRate, Beta1: a.Beta1, Beta2: a.Beta2, Eps: a.Eps, WeightDecay: a.WeightDecay, ClipNorm: a.GradClipNorm}
	if m.accN == 0 { // no forward_backward since the last step: nothing to apply
		return 0, nil
	}
	m.accN = 0
	st, err := m.tr.ApplyGradients(ctx)
	return st.GradNorm, err
}

func (m *Transformer) save(name string) (snapshot, error) {
	w, err := m.tr.Weights()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(m.tmp, name)
	if err := m.tr.SaveCheckpoint(dir); err != nil {
		return nil, err
	}
	return &transformerSnap{w: w, ckpt: dir, gm: m.gm, opts: model.EngineOptions{Name: "tinker-stand-in", MaxBatch: 16}}, nil
}

func (m *Transformer) load(s snapshot, optimizer bool) error {
	ts, ok := s.(*transformerSnap)
	if !ok {
		return fmt.Errorf("weights of another model")
	}
	var tr *model.Trainer
	var err error
	if optimizer {
		tr, err = model.LoadTrainer(m.tm, ts.ckpt, m.tr.Opt)
	} else {
		tr, err = model.NewTrainer(m.tm, ts.w, m.tr.Opt)
	}
	if err != nil {
		return err
	}
	m.tr, m.accN = tr, 0
	return nil
}

func (s *transformerSnap) sample(ctx context.Context, prompt []int32, maxTokens int, temp, topP float64, topK int, stop []int32, seed uint64) ([]int32, []float32, bool, error) {
	s.once.Do(func() { s.eng, s.err = model.NewEngine(s.gm, s.w, 0, s.opts) })
	if s.err != nil {
		return nil, nil, false, s.err
	}
	r, err := s.eng.Generate(ctx, prompt, engine.Sampling{Temperature: float32(temp), TopP: float32(topP), TopK: topK,
		MaxTokens: maxTokens, StopIDs: stop, Seed: seed})
	if err != nil {
		return nil, nil, false, err
	}
	return r.IDs, r.Logprobs, r.FinishReason == engine.FinishStop, nil
}

func (s *transformerSnap) close() {
	if s.eng != nil {
		s.eng.Close()
	}
	os.RemoveAll(s.ckpt)
}

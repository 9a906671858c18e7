package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/aglrl/agl/model/safetensors"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph DSL
	"github.com/gomlx/gomlx/core/tensors"
)

// AdamW configures the optimizer.
type AdamW struct {
	LR          float64 `json:"lr"`
	Beta1       float64 `json:"beta1"`
	Beta2       float64 `json:"beta2"`
	Eps         float64 `json:"eps"`
	WeightDecay float64 `json:"weight_decay"` // decoupled; applied to matrices only
	ClipNorm    float64 `json:"clip_norm"`    // global gradient norm clip; 0 disables
}

// DefaultAdamW is a common small-model setting.
func DefaultAdamW() AdamW {
	return AdamW{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, ClipNorm: 1}
}

// Batch is a batch of token sequences with per-token training data. Every
// per-token slice has the length of its sequence, and index t refers to
// token t (the prediction of token t from tokens < t); index 0 is never
// trained.
type Batch struct {
	IDs [][]int32
	// Weights w_t: the loss is Σ_t w_t·ℓ_t (so a mean over assistant tokens
	// is weights 1/N on them and 0 elsewhere).
	Weights [][]float32
	// Policy-gradient inputs (ignored by StepSFT). Mask m_t ∈ {0,1};
	// Behavior = rollout log-probs; OldLogp optional (decoupled PPO/TIS);
	// RefLogp optional (KL penalty).
	Mask, Behavior, OldLogp, RefLogp, Advantages [][]float32
}

// StepStats describes one optimizer step.
type StepStats struct {
	Step     int64
	Loss     float64
	GradNorm float64 // before clipping
	Tokens   int     // tokens with nonzero weight
	// Policy-gradient only.
	EntropyMean, ClipFrac, ApproxKL float64
}

// Trainer holds trainable weights and AdamW state on the backend.
type Trainer struct {
	m   *Model
	Opt AdamW

	params, mom, vel []*tensors.Tensor
	step             int64

	sftExec, pgExec                  *Exec
	accSFTExec, accPGExec, applyExec *Exec

	// acc holds accumulated gradients (device layout) between
	// Accumulate* calls and ApplyGradients; nil when empty.
	acc       []*tensors.Tensor
	accTokens int
}

// NewTrainer starts training from w with fresh optimizer state.
func NewTrainer(m *Model, w *Weights, opt AdamW) (*Trainer, error) {
	d, err := m.Upload(w)
	if err != nil {
		return nil, err
	}
	t := &Trainer{m: m, Opt: opt, params: d.tensors}
	for i, spec := range m.cfg.Params() {
		_ = i
		t.mom = append(t.mom, tensors.FromShape(shapes.Make(dtypes.Float32, deviceShape(spec)...)))
		t.vel = append(t.vel, tensors.FromShape(shapes.Make(dtypes.Float32, deviceShape(spec)...)))
	}
	if err := t.compile(); err != nil {
		return nil, err
	}
	return t, nil
}

// Step is the number of optimizer steps taken.
func (t *Trainer) Step() int64 { return t.step }

// LogProbs computes teacher-forced log-probs and entropies with the
// trainer's current weights (see Model.LogProbs), e.g. the π_old of
// decoupled PPO or a reference model's log-probs.
func (t *Trainer) LogProbs(ctx context.Context, seqs [][]int32) (logp, entropy [][]float32, err error) {
	return t.m.LogProbs(ctx, &DeviceWeights{tensors: t.params}, seqs)
}

// Weights downloads the current weights.
func (t *Trainer) Weights() (*Weights, error) { return t.m.Download(&DeviceWeights{tensors: t.params}) }

const numOptScalars = 7 // step, lr, b1, b2, eps, wd, clip

func (t *Trainer) compile() error {
	cfg := t.m.cfg
	n := len(cfg.Params())
	build := func(lossFn func(g *Graph, logp, ent *Node, extra []*Node) (*Node, []*Node)) func(g *Graph, ins []*Node) []*Node {
		return func(g *Graph, ins []*Node) []*Node {
			params, mom, vel := ins[:n], ins[n:2*n], ins[2*n:3*n]
			sc := ins[3*n : 3*n+numOptScalars]
			rest := ins[3*n+numOptScalars:]
			ids := rest[0]
			logp, ent := newTrainNet(cfg, params).tokenLogProbs(ids)
			loss, stats := lossFn(g, logp, ent, rest[1:])
			grads := Gradient(loss, params...)
			newP, newM, newV, gnorm := adamW(params, mom, vel, grads, sc)
			outs := append(append(append(newP, newM...), newV...), loss, gnorm)
			return append(outs, stats...)
		}
	}
	var err error
	t.sftExec, err = NewExec(t.m.backend, build(sftLoss))
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	t.pgExec, err = NewExec(t.m.backend, build(pgLoss))
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	// Accumulation graphs: params, acc[n], batch... -> acc+grads, loss, stats.
	buildAcc := func(lossFn func(g *Graph, logp, ent *Node, extra []*Node) (*Node, []*Node)) func(g *Graph, ins []*Node) []*Node {
		return func(g *Graph, ins []*Node) []*Node {
			params, acc, rest := ins[:n], ins[n:2*n], ins[2*n:]
			logp, ent := newTrainNet(cfg, params).tokenLogProbs(rest[0])
			loss, stats := lossFn(g, logp, ent, rest[1:])
			grads := Gradient(loss, params...)
			outs := make([]*Node, 0, n+1+len(stats))
			for i := range grads {
				outs = append(outs, Add(acc[i], grads[i]))
			}
			return append(append(outs, loss), stats...)
		}
	}
	if t.accSFTExec, err = NewExec(t.m.backend, buildAcc(sftLoss)); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	if t.accPGExec, err = NewExec(t.m.backend, buildAcc(pgLoss)); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	// apply(params, m, v, acc, scalars) -> params', m', v', grad norm.
	t.applyExec, err = NewExec(t.m.backend, func(g *Graph, ins []*Node) []*Node {
		params, mom, vel, acc := ins[:n], ins[n:2*n], ins[2*n:3*n], ins[3*n:4*n]
		newP, newM, newV, gnorm := adamW(params, mom, vel, acc, ins[4*n:4*n+numOptScalars])
		return append(append(append(newP, newM...), newV...), gnorm)
	})
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	for _, e := range []*Exec{t.sftExec, t.pgExec, t.accSFTExec, t.accPGExec} {
		e.SetMaxCache(1024)
	}
	return nil
}

func sftLoss(g *Graph, logp, ent *Node, extra []*Node) (*Node, []*Node) {
	return Neg(ReduceAllSum(Mul(logp, extra[0]))), nil
}

func pgLoss(g *Graph, logp, ent *Node, x []*Node) (*Node, []*Node) {
	return policyLoss(policyLossInputs{logp: logp, entropy: ent,
		w: x[0], mask: x[1], behavior: x[2], old: x[3], ref: x[4], adv: x[5],
		clipLow: x[6], clipHigh: x[7], dual: x[8], tis: x[9], klCoef: x[10], klK3: x[11], entCoef: x[12], clamp: x[13], hasOld: x[14]})
}

// adamW clips gradients by global norm and applies one decoupled-weight-
// decay Adam update. sc = step, lr, beta1, beta2, eps, weight decay, clip.
func adamW(params, mom, vel, grads []*Node, sc []*Node) (newP, newM, newV []*Node, gnorm *Node) {
	g := params[0].Graph()
	step, lr, b1, b2, eps, wd, clip := sc[0], sc[1], sc[2], sc[3], sc[4], sc[5], sc[6]
	one := ScalarOne(g, dtypes.Float32)
	sq := ScalarZero(g, dtypes.Float32)
	for _, gr := range grads {
		sq = Add(sq, ReduceAllSum(Square(gr)))
	}
	gnorm = Sqrt(sq)
	scale := Where(GreaterThan(clip, ScalarZero(g, dtypes.Float32)),
		Min(one, Div(clip, AddScalar(gnorm, 1e-6))), one)
	bc1 := Sub(one, Pow(b1, step))
	bc2 := Sub(one, Pow(b2, step))
	// The scalars stay rank 0 on the right of each operation: the Go
	// backend multiplies by a scalar right operand directly, where a
	// broadcast operand would first be written out at the weight's size.
	omb1, omb2 := Sub(one, b1), Sub(one, b2)
	for i, p := range params {
		gr := Mul(grads[i], scale)
		m := Add(Mul(mom[i], b1), Mul(gr, omb1))
		v := Add(Mul(vel[i], b2), Mul(Square(gr), omb2))
		upd := Div(Div(m, bc1), Add(Sqrt(Div(v, bc2)), eps))
		if p.Rank() >= 2 {
			upd = Add(upd, Mul(p, wd))
		}
		newP = append(newP, Sub(p, Mul(upd, lr)))
		newM = append(newM, m)
		newV = append(newV, v)
	}
	return newP, newM, newV, gnorm
}

// pad2 right-pads per-token float rows into a [rows, cols] tensor.
func pad2(rowsData [][]float32, rows, cols int) *tensors.Tensor {
	flat := make([]float32, rows*cols)
	for i, r := range rowsData {
		copy(flat[i*cols:], r)
	}
	return tensors.FromFlatDataAndDimensions(flat, rows, cols)
}

func f32(v float64) *tensors.Tensor { return tensors.FromScalar(float32(v)) }

func (t *Trainer) shape(b *Batch) (rows, cols int, err error) {
	if len(b.IDs) == 0 {
		return 0, 0, errors.New("model: empty batch")
	}
	maxLen := 2
	for i, s := range b.IDs {
		maxLen = max(maxLen, len(s))
		for _, id := range s {
			if id < 0 || int(id) >= t.m.cfg.VocabSize {
				return 0, 0, fmt.Errorf("model: token id %d outside vocabulary of %d", id, t.m.cfg.VocabSize)
			}
		}
		if len(b.Weights) != len(b.IDs) || len(b.Weights[i]) != len(s) {
			return 0, 0, fmt.Errorf("model: batch row %d: weights do not match ids", i)
		}
	}
	if err := t.m.checkLength(maxLen); err != nil {
		return 0, 0, err
	}
	return bucket(len(b.IDs)), bucket(maxLen), nil
}

func (t *Trainer) optArgs() []any {
	a := make([]any, 0, 3*len(t.params)+32)
	for _, s := range [][]*tensors.Tensor{t.params, t.mom, t.vel} {
		for _, x := range s {
			a = append(a, x)
		}
	}
	o := t.Opt
	return append(a, f32(float64(t.step+1)), f32(o.LR), f32(o.Beta1), f32(o.Beta2), f32(o.Eps), f32(o.WeightDecay), f32(o.ClipNorm))
}

func (t *Trainer) run(ctx context.Context, exec *Exec, args []any, b *Batch) (StepStats, error) {
	if err := ctx.Err(); err != nil {
		return StepStats{}, err
	}
	outs, err := exec.Call(args...)
	if err != nil {
		return StepStats{}, fmt.Errorf("model: train step: %w", err)
	}
	n := len(t.params)
	t.install(outs)
	st := StepStats{Step: t.step, Tokens: countTokens(b)}
	st.Loss = float64(tensors.ToScalar[float32](outs[3*n]))
	st.GradNorm = float64(tensors.ToScalar[float32](outs[3*n+1]))
	if len(outs) >= 3*n+5 {
		st.EntropyMean = float64(tensors.ToScalar[float32](outs[3*n+2]))
		st.ClipFrac = float64(tensors.ToScalar[float32](outs[3*n+3]))
		st.ApproxKL = float64(tensors.ToScalar[float32](outs[3*n+4]))
	}
	return st, nil
}

// install takes new params, m, v from a step's outputs and counts the step.
func (t *Trainer) install(outs []*tensors.Tensor) {
	n := len(t.params)
	for _, old := range [][]*tensors.Tensor{t.params, t.mom, t.vel} {
		for _, x := range old {
			x.FinalizeAll()
		}
	}
	t.params, t.mom, t.vel = outs[:n], outs[n:2*n], outs[2*n:3*n]
	t.step++
}

// StepSFT takes one AdamW step on the weighted cross-entropy
// −Σ w_t·log p(token t).
func (t *Trainer) StepSFT(ctx context.Context, b *Batch) (StepStats, error) {
	ba, err := t.sftArgs(b)
	if err != nil {
		return StepStats{}, err
	}
	return t.run(ctx, t.sftExec, append(t.optArgs(), ba...), b)
}

// SFTStep implements SFTStepper: StepSFT at learning rate lr (Opt.LR
// is restored after).
func (t *Trainer) SFTStep(ctx context.Context, b *Batch, lr float64) (float64, error) {
	base := t.Opt.LR
	defer func() { t.Opt.LR = base }()
	t.Opt.LR = lr
	st, err := t.StepSFT(ctx, b)
	return st.Loss, err
}

// StepPolicy takes one AdamW step on the policy-gradient loss (see
// policyLoss; it matches samples.PolicyLoss).
func (t *Trainer) StepPolicy(ctx context.Context, b *Batch, lc PolicyLossConfig) (StepStats, error) {
	ba, err := t.pgArgs(b, lc)
	if err != nil {
		return StepStats{}, err
	}
	return t.run(ctx, t.pgExec, append(t.optArgs(), ba...), b)
}

// AccumulateSFT adds the gradient of b's SFT loss to the accumulated
// gradients, for batches too large for one pass: weights must already be
// normalized over the whole (accumulated) batch. ApplyGradients then takes
// the step. The returned stats are b's (Step and GradNorm unset).
func (t *Trainer) AccumulateSFT(ctx context.Context, b *Batch) (StepStats, error) {
	ba, err := t.sftArgs(b)
	if err != nil {
		return StepStats{}, err
	}
	return t.accumulate(ctx, t.accSFTExec, ba, b)
}

// AccumulatePolicy is AccumulateSFT for the policy-gradient loss.
func (t *Trainer) AccumulatePolicy(ctx context.Context, b *Batch, lc PolicyLossConfig) (StepStats, error) {
	ba, err := t.pgArgs(b, lc)
	if err != nil {
		return StepStats{}, err
	}
	return t.accumulate(ctx, t.accPGExec, ba, b)
}

func (t *Trainer) accumulate(ctx context.Context, exec *Exec, batchArgs []any, b *Batch) (StepStats, error) {
	if err := ctx.Err(); err != nil {
		return StepStats{}, err
	}
	n := len(t.params)
	if t.acc == nil {
		for _, spec := range t.m.cfg.Params() {
			t.acc = append(t.acc, tensors.FromShape(shapes.Make(dtypes.Float32, deviceShape(spec)...)))
		}
	}
	args := make([]any, 0, 2*n+len(batchArgs))
	for _, x := range t.params {
		args = append(args, x)
	}
	for _, x := range t.acc {
		args = append(args, x)
	}
	outs, err := exec.Call(append(args, batchArgs...)...)
	if err != nil {
		return StepStats{}, fmt.Errorf("model: accumulate: %w", err)
	}
	for i := range t.acc {
		t.acc[i].FinalizeAll()
		t.acc[i] = outs[i]
	}
	st := StepStats{Step: t.step, Loss: float64(tensors.ToScalar[float32](outs[n])), Tokens: countTokens(b)}
	if len(outs) >= n+4 {
		st.EntropyMean = float64(tensors.ToScalar[float32](outs[n+1]))
		st.ClipFrac = float64(tensors.ToScalar[float32](outs[n+2]))
		st.ApproxKL = float64(tensors.ToScalar[float32](outs[n+3]))
	}
	t.accTokens += st.Tokens
	return st, nil
}

// ApplyGradients takes one AdamW step with the accumulated gradients and
// clears them. Loss in the stats is 0 (the micro-batches reported theirs).
func (t *Trainer) ApplyGradients(ctx context.Context) (StepStats, error) {
	if t.acc == nil {
		return StepStats{}, errors.New("model: no accumulated gradients")
	}
	if err := ctx.Err(); err != nil {
		return StepStats{}, err
	}
	n := len(t.params)
	all := t.optArgs() // params, m, v, scalars
	args := append(append([]any{}, all[:3*n]...), accArgs(t.acc)...)
	args = append(args, all[3*n:]...)
	outs, err := t.applyExec.Call(args...)
	if err != nil {
		return StepStats{}, fmt.Errorf("model: apply gradients: %w", err)
	}
	t.install(outs)
	for _, x := range t.acc {
		x.FinalizeAll()
	}
	t.acc = nil
	st := StepStats{Step: t.step, GradNorm: float64(tensors.ToScalar[float32](outs[3*n])), Tokens: t.accTokens}
	t.accTokens = 0
	return st, nil
}

func accArgs(acc []*tensors.Tensor) []any {
	a := make([]any, len(acc))
	for i, x := range acc {
		a[i] = x
	}
	return a
}

func countTokens(b *Batch) int {
	n := 0
	for _, r := range b.Weights {
		for j, w := range r {
			if j > 0 && w != 0 {
				n++
			}
		}
	}
	return n
}

func (t *Trainer) sftArgs(b *Batch) ([]any, error) {
	rows, cols, err := t.shape(b)
	if err != nil {
		return nil, err
	}
	return []any{tensors.FromFlatDataAndDimensions(padIDs(b.IDs, rows, cols), rows, cols), pad2(b.Weights, rows, cols)}, nil
}

func (t *Trainer) pgArgs(b *Batch, lc PolicyLossConfig) ([]any, error) {
	rows, cols, err := t.shape(b)
	if err != nil {
		return nil, err
	}
	for name, x := range map[string][][]float32{"mask": b.Mask, "behavior": b.Behavior, "advantages": b.Advantages, "old_logp": b.OldLogp, "ref_logp": b.RefLogp} {
		if x == nil && (name == "old_logp" || name == "ref_logp") {
			continue
		}
		if len(x) != len(b.IDs) {
			return nil, fmt.Errorf("model: batch %s has %d rows, ids %d", name, len(x), len(b.IDs))
		}
		for i := range x {
			if len(x[i]) != len(b.IDs[i]) {
				return nil, fmt.Errorf("model: batch %s row %d has %d values for %d tokens", name, i, len(x[i]), len(b.IDs[i]))
			}
		}
	}
	old, hasOld := b.OldLogp, 1.0
	if old == nil {
		old, hasOld = b.Behavior, 0
	}
	klCoef := lc.KLCoef
	if b.RefLogp == nil {
		klCoef = 0
	}
	clamp := lc.LogRatioClamp
	if clamp == 0 {
		clamp = 20
	}
	klK3 := 1.0
	if lc.KLK1 {
		klK3 = 0
	}
	return []any{tensors.FromFlatDataAndDimensions(padIDs(b.IDs, rows, cols), rows, cols),
		pad2(b.Weights, rows, cols), pad2(b.Mask, rows, cols), pad2(b.Behavior, rows, cols), pad2(old, rows, cols),
		pad2(b.RefLogp, rows, cols), pad2(b.Advantages, rows, cols),
		f32(lc.ClipLow), f32(lc.ClipHigh), f32(lc.DualClip), f32(lc.TISCap), f32(klCoef), f32(klK3), f32(lc.EntropyCoef), f32(clamp), f32(hasOld)}, nil
}

// Checkpoint files written by SaveCheckpoint besides the model files.
const (
	OptimizerFile = "optimizer.safetensors"
)

// SaveCheckpoint writes the weights (config.json, model.safetensors) and
// the optimizer state and step (optimizer.safetensors) into dir.
func (t *Trainer) SaveCheckpoint(dir string) error {
	w, err := t.Weights()
	if err != nil {
		return err
	}
	if err := w.Save(dir); err != nil {
		return err
	}
	opt, _ := json.Marshal(t.Opt)
	f := &safetensors.File{Tensors: map[string]safetensors.Tensor{},
		Metadata: map[string]string{"step": strconv.FormatInt(t.step, 10), "adamw": string(opt)}}
	for i, spec := range t.m.cfg.Params() {
		for prefix, s := range map[string][]*tensors.Tensor{"m.": t.mom, "v.": t.vel} {
			data, err := tensors.CopyFlatData[float32](s[i])
			if err != nil {
				return fmt.Errorf("model: checkpoint: %w", err)
			}
			f.Tensors[prefix+spec.Name] = tensorOf(spec.Shape, fromDevice(spec, data))
		}
	}
	return safetensors.WriteFile(filepath.Join(dir, OptimizerFile), f)
}

// LoadTrainer resumes training from a checkpoint directory; without an
// optimizer file it starts fresh optimizer state with opt.
func LoadTrainer(m *Model, dir string, opt AdamW) (*Trainer, error) {
	w, err := Load(dir)
	if err != nil {
		return nil, err
	}
	t, err := NewTrainer(m, w, opt)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, OptimizerFile)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return t, nil
	}
	f, err := safetensors.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if t.step, err = strconv.ParseInt(f.Metadata["step"], 10, 64); err != nil {
		return nil, fmt.Errorf("model: checkpoint step: %w", err)
	}
	if s := f.Metadata["adamw"]; s != "" {
		if err := json.Unmarshal([]byte(s), &t.Opt); err != nil {
			return nil, fmt.Errorf("model: checkpoint optimizer: %w", err)
		}
	}
	for i, spec := range m.cfg.Params() {
		for prefix, s := range map[string][]*tensors.Tensor{"m.": t.mom, "v.": t.vel} {
			x, ok := f.Tensors[prefix+spec.Name]
			if !ok || len(x.Data) != prod(spec.Shape) {
				return nil, fmt.Errorf("model: checkpoint: missing or misshapen %s%s", prefix, spec.Name)
			}
			s[i] = toDevice(spec, x.Data)
		}
	}
	return t, nil
}

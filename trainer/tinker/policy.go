package tinker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/aglrl/agl/samples"
	"github.com/aglrl/agl/trainer"
)

// The loss functions agl drives (Tinker's built-in losses, per-token SUM).
const (
	LossImportanceSampling = "importance_sampling"
	LossPPO                = "ppo"
	LossCrossEntropy       = "cross_entropy"
)

// The services whose loss semantics agl knows (Options.Server).
const (
	// ServerTinker is Thinking Machines' Tinker: each built-in loss is the
	// per-token SUM over the datums.
	ServerTinker = "tinker"
	// ServerSkyRLJAX is SkyRL's Tinker server on its JAX backend: each
	// datum's loss is divided by the sum of its weights (all ones for the
	// policy losses), so agl scales the datum's advantages by its target
	// count to restore the SUM; cross_entropy, whose weighted per-datum
	// mean no scaling can undo, is refused.
	ServerSkyRLJAX = "skyrl-jax"
	// ServerSkyRLTrain is SkyRL's Tinker server on its FSDP/Megatron
	// backends, where only cross_entropy and importance_sampling are
	// wired: ppo is refused.
	ServerSkyRLTrain = "skyrl-train"
)

// LoRA is the adapter a policy trains (the SDK's LoraConfig).
type LoRA struct {
	Rank                              int
	Seed                              *int64
	TrainMLP, TrainAttn, TrainUnembed bool
}

// Adam is optim_step's adam_params (the SDK's AdamParams).
type Adam struct {
	LearningRate float64 `json:"learning_rate"`
	Beta1        float64 `json:"beta1"`
	Beta2        float64 `json:"beta2"`
	Eps          float64 `json:"eps"`
	WeightDecay  float64 `json:"weight_decay"`
	GradClipNorm float64 `json:"grad_clip_norm"`
}

// DefaultAdam is the SDK's AdamParams defaults.
func DefaultAdam() Adam {
	return Adam{LearningRate: 1e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-12}
}

// Options configure one Tinker policy.
type Options struct {
	// Name is the policy's model name (the engine's ModelName).
	Name      string
	BaseModel string
	LoRA      LoRA
	// Loss is importance_sampling, ppo (default) or cross_entropy.
	Loss string
	// ClipLow, ClipHigh are ε_low, ε_high of ppo (trainer.clip_low/high).
	ClipLow, ClipHigh float64
	Adam              Adam
	// Epochs is the number of optim_steps per step over the same samples
	// (trainer.ppo_epochs; default 1).
	Epochs int
	// MicroBatchTokens bounds the tokens of one forward_backward call; a
	// step's calls all accumulate before its optim_step (default 4096).
	MicroBatchTokens int
	// MaxContext is the base model's context length (prompt + response).
	MaxContext int
	// Server is ServerTinker (default), ServerSkyRLJAX or
	// ServerSkyRLTrain: the loss semantics the datums are built for.
	Server string
}

// OptionsFrom fills o's loss and optimizer settings from the `trainer:`
// section (its defaults applied), refusing, by name, what Tinker's
// built-in losses cannot compute.
func OptionsFrom(c trainer.Config, o Options) (Options, error) {
	c = c.WithDefaults()
	for _, x := range []struct {
		name string
		on   bool
	}{{"dual_clip", c.DualClip != 0}, {"tis_cap", c.TISCap != 0}, {"kl_coef", c.KLCoef != 0},
		{"entropy_coef", c.EntropyCoef != 0}} {
		if x.on {
			return o, fmt.Errorf("tinker policy: trainer.%s is not supported: Tinker's built-in losses have no such term", x.name)
		}
	}
	o.ClipLow, o.ClipHigh = c.ClipLow, c.ClipHigh
	o.Adam.LearningRate = c.LR
	o.Epochs, o.MicroBatchTokens = c.PPOEpochs, c.MicroBatchTokens
	return o, nil
}

func (o *Options) check() error {
	if o.Loss == "" {
		o.Loss = LossPPO
	}
	switch o.Loss {
	case LossImportanceSampling, LossPPO, LossCrossEntropy:
	default:
		return fmt.Errorf("tinker policy: loss %q: want importance_sampling, ppo or cross_entropy", o.Loss)
	}
	if o.BaseModel == "" {
		return errors.New("tinker policy: no base_model")
	}
	switch {
	case o.Server == "":
		o.Server = ServerTinker
	case o.Server != ServerTinker && o.Server != ServerSkyRLJAX && o.Server != ServerSkyRLTrain:
		return fmt.Errorf("tinker policy: server %q: want tinker, skyrl-jax or skyrl-train", o.Server)
	case o.Server == ServerSkyRLJAX && o.Loss == LossCrossEntropy:
		return errors.New("tinker policy: cross_entropy on skyrl-jax: the server averages each datum's loss over its weights, which agl's per-token weights cannot undo")
	case o.Server == ServerSkyRLTrain && o.Loss == LossPPO:
		return errors.New("tinker policy: ppo on skyrl-train: the server wires only cross_entropy and importance_sampling")
	}
	if o.LoRA.Rank <= 0 {
		return fmt.Errorf("tinker policy: lora rank %d: want > 0", o.LoRA.Rank)
	}
	if o.Loss == LossPPO && (o.ClipLow <= 0 || o.ClipLow >= 1 || o.ClipHigh <= 0) {
		return fmt.Errorf("tinker policy: ppo clip (%v, %v): want 0 < clip_low < 1 and clip_high > 0", o.ClipLow, o.ClipHigh)
	}
	if o.Epochs <= 0 {
		o.Epochs = 1
	}
	if o.MicroBatchTokens <= 0 {
		o.MicroBatchTokens = 4096
	}
	if o.Name == "" {
		o.Name = o.BaseModel
	}
	return nil
}

// checkpointFile holds what a resume needs, inside agl's checkpoint dir.
const checkpointFile = "tinker.json"

type checkpoint struct {
	SDKVersion string `json:"sdk_version"`
	BaseModel  string `json:"base_model"`
	// StatePath is save_weights' tinker:// path (weights and optimizer).
	StatePath string `json:"state_path"`
}

// Policy is a trainer.Policy whose weights live in a Tinker service.
type Policy struct {
	c       *Client
	sess    *Session
	o       Options
	modelID string
	eng     *Engine

	mu    sync.Mutex
	seq   int32 // last seq_id sent on modelID
	saves int
}

// New creates a session and a LoRA training model on the service, and
// restores the checkpoint in resumeDir when it is not "" (load_weights
// with optimizer state). Its engine serves version (the run's current
// one) from a sampler saved right away.
func New(ctx context.Context, c *Client, o Options, resumeDir string, version int64) (*Policy, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	var ck checkpoint
	if resumeDir != "" {
		b, err := os.ReadFile(filepath.Join(resumeDir, checkpointFile))
		if err != nil {
			return nil, fmt.Errorf("tinker policy: resume: %w", err)
		}
		if err := json.Unmarshal(b, &ck); err != nil || !strings.HasPrefix(ck.StatePath, "tinker://") {
			return nil, fmt.Errorf("tinker policy: resume: %s holds no tinker:// state path", filepath.Join(resumeDir, checkpointFile))
		}
		if ck.BaseModel != o.BaseModel {
			return nil, fmt.Errorf("tinker policy: resume: the checkpoint is of base model %q, not %q", ck.BaseModel, o.BaseModel)
		}
	}
	sess, err := c.NewSession(ctx, nil)
	if err != nil {
		return nil, err
	}
	p := &Policy{c: c, sess: sess, o: o}
	if err := p.create(ctx); err != nil {
		sess.Close()
		return nil, err
	}
	if ck.StatePath != "" {
		err = p.c.result(ctx, "/api/v1/load_weights", map[string]any{"model_id": p.modelID, "seq_id": p.nextSeq(),
			"path": ck.StatePath, "optimizer": true, "type": "load_weights"}, nil)
		if err != nil {
			sess.Close()
			return nil, err
		}
	}
	p.eng = &Engine{c: c, sess: sess, name: o.Name, maxContext: o.MaxContext}
	if err := p.Publish(ctx, version); err != nil {
		sess.Close()
		return nil, err
	}
	return p, nil
}

func (p *Policy) create(ctx context.Context) error {
	lora := map[string]any{"rank": p.o.LoRA.Rank, "train_unembed": p.o.LoRA.TrainUnembed,
		"train_mlp": p.o.LoRA.TrainMLP, "train_attn": p.o.LoRA.TrainAttn}
	if p.o.LoRA.Seed != nil {
		lora["seed"] = *p.o.LoRA.Seed
	}
	var r struct {
		ModelID string `json:"model_id"`
	}
	err := p.c.result(ctx, "/api/v1/create_model", map[string]any{"session_id": p.sess.ID, "model_seq_id": 0,
		"base_model": p.o.BaseModel, "lora_config": lora, "type": "create_model"}, &r)
	if err != nil {
		return err
	}
	if r.ModelID == "" {
		return errors.New("tinker /api/v1/create_model: malformed answer: no model_id")
	}
	p.modelID = r.ModelID
	return nil
}

// Engine is the policy's generation engine (it serves the published
// sampler).
func (p *Policy) Engine() *Engine { return p.eng }

// Close ends the session's heartbeats.
func (p *Policy) Close() { p.sess.Close() }

func (p *Policy) nextSeq() int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	return p.seq
}

// datumTokens is what Step keeps of a datum to read its output.
type datumTokens struct {
	behavior []float64 // sampling log-probs of the targets
	mask     []bool
}

// Datums turns agl samples into forward_backward datums for loss. A
// sample of n tokens gives model_input IDs[:n−1] and target_tokens
// IDs[1:] (position i predicts token i+1); agl's per-token loss weight w
// and mask m fold into the per-token SUM Tinker computes: for the policy
// losses advantages = w·m·A with logprobs the sampling log-probs, for
// cross_entropy weights = w·m. Then Tinker's Σ_t advantages_t·ℓ_t is
// agl's Σ_t w_t·m_t·ℓ_t(A_t), for weights ≥ 0 (ApplyWeights's are). For
// ServerSkyRLJAX the advantages are also multiplied by the datum's
// target count, which that server divides the datum's loss by.
func Datums(ss []*samples.Sample, loss, server string) ([]Datum, error) {
	ds := make([]Datum, 0, len(ss))
	for k, s := range ss {
		n := len(s.IDs)
		if n < 2 {
			return nil, fmt.Errorf("tinker: sample %d (rollout %s) has %d tokens: nothing to predict", k, s.RolloutID, n)
		}
		if len(s.LossMask) != n || len(s.Logprobs) != n || len(s.Weights) != n {
			return nil, fmt.Errorf("tinker: sample %d (rollout %s): %d ids, %d mask, %d logprobs, %d weights",
				k, s.RolloutID, n, len(s.LossMask), len(s.Logprobs), len(s.Weights))
		}
		adv := s.TokenAdvantages()
		scale := float32(1)
		if server == ServerSkyRLJAX {
			scale = float32(n - 1)
		}
		w := make([]float32, n-1)
		a := make([]float32, n-1)
		lp := make([]float32, n-1)
		for i := 0; i < n-1; i++ {
			j := i + 1
			if s.LossMask[j] == 0 {
				continue
			}
			if s.Weights[j] < 0 {
				return nil, fmt.Errorf("tinker: sample %d (rollout %s): negative loss weight %v", k, s.RolloutID, s.Weights[j])
			}
			w[i] = s.Weights[j]
			a[i] = scale * s.Weights[j] * adv[j]
			lp[i] = s.Logprobs[j]
		}
		d := Datum{Tokens: s.IDs[:n-1], Inputs: map[string]Tensor{"target_tokens": Int64Tensor(s.IDs[1:])}}
		if loss == LossCrossEntropy {
			d.Inputs["weights"] = Float32Tensor(w)
		} else {
			d.Inputs["logprobs"] = Float32Tensor(lp)
			d.Inputs["advantages"] = Float32Tensor(a)
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// lossConfig is forward_backward's loss_fn_config: ppo's ratio clip
// thresholds [1−ε_low, 1+ε_high].
func (p *Policy) lossConfig() map[string]float64 {
	if p.o.Loss != LossPPO {
		return nil
	}
	return map[string]float64{"clip_low_threshold": 1 - p.o.ClipLow, "clip_high_threshold": 1 + p.o.ClipHigh}
}

func (p *Policy) alive() error {
	if err := p.sess.Err(); err != nil {
		return fmt.Errorf("%w; the run stops rather than train on a stale sampler", err)
	}
	return nil
}

// Step implements trainer.Policy: Epochs rounds, each of forward_backward
// calls over micro-batches of the samples (gradients accumulate on the
// service) and one optim_step. The stats are the last round's.
func (p *Policy) Step(ctx context.Context, ss []samples.Sample) (trainer.StepStats, error) {
	if err := p.alive(); err != nil {
		return trainer.StepStats{}, err
	}
	packed, _ := samples.Pack(ss, p.o.MicroBatchTokens, 0)
	type call struct {
		req   ForwardBackwardRequest
		infos []datumTokens
	}
	var calls []call
	for _, b := range packed {
		ds, err := Datums(b.Samples, p.o.Loss, p.o.Server)
		if err != nil {
			return trainer.StepStats{}, err
		}
		infos := make([]datumTokens, len(ds))
		for i, s := range b.Samples {
			n := len(s.IDs) - 1
			in := datumTokens{behavior: make([]float64, n), mask: make([]bool, n)}
			for t := 0; t < n; t++ {
				in.mask[t] = s.LossMask[t+1] != 0
				in.behavior[t] = float64(s.Logprobs[t+1])
			}
			infos[i] = in
		}
		calls = append(calls, call{req: ForwardBackwardRequest{LossFn: p.o.Loss, LossFnConfig: p.lossConfig(), Data: ds}, infos: infos})
	}
	var st trainer.StepStats
	for e := 0; e < p.o.Epochs; e++ {
		st = trainer.StepStats{}
		var kl, clip float64
		// Submit every call of the round, then collect (the service runs
		// them in seq_id order).
		ids := make([]string, len(calls))
		for i := range calls {
			calls[i].req.ModelID, calls[i].req.SeqID = p.modelID, p.nextSeq()
			id, err := p.c.submit(ctx, "/api/v1/forward_backward", ctProto, calls[i].req.Marshal())
			if err != nil {
				return st, err
			}
			ids[i] = id
		}
		optID, err := p.c.submitJSON(ctx, "/api/v1/optim_step", map[string]any{"adam_params": p.o.Adam,
			"model_id": p.modelID, "seq_id": p.nextSeq(), "type": "optim_step"})
		if err != nil {
			return st, err
		}
		for i, id := range ids {
			r, err := p.c.retrieve(ctx, "/api/v1/forward_backward", id, true)
			if err != nil {
				return st, err
			}
			out, err := UnmarshalForwardBackwardOutput(r.body)
			if err != nil {
				return st, fmt.Errorf("tinker /api/v1/forward_backward: malformed answer: %w", err)
			}
			if err := p.readOutput(out, calls[i].req, calls[i].infos, &st, &kl, &clip); err != nil {
				return st, fmt.Errorf("tinker /api/v1/forward_backward: %w", err)
			}
		}
		r, err := p.c.retrieve(ctx, "/api/v1/optim_step", optID, false)
		if err != nil {
			return st, err
		}
		var om struct {
			Metrics map[string]float64 `json:"metrics"`
		}
		if err := decodeJSON("/api/v1/optim_step", r.body, &om); err != nil {
			return st, err
		}
		for k, v := range om.Metrics {
			if strings.HasPrefix(k, "grad_norm") {
				st.GradNorm = v
			}
		}
		if st.Tokens > 0 {
			st.ApproxKL, st.ClipFrac = kl/float64(st.Tokens), clip/float64(st.Tokens)
		}
	}
	return st, nil
}

// readOutput checks one forward_backward result against its request and
// adds its loss, tokens, KL and clip counts.
func (p *Policy) readOutput(out ForwardBackwardOutput, req ForwardBackwardRequest, infos []datumTokens, st *trainer.StepStats, kl, clip *float64) error {
	if len(out.Outputs) != len(req.Data) {
		return fmt.Errorf("%d outputs for %d datums", len(out.Outputs), len(req.Data))
	}
	for k, v := range out.Metrics {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("metric %s is %v", k, v)
		}
		if k == "loss:sum" || k == "total_loss:sum" { // Tinker's, SkyRL-Train's
			st.Loss += v
		}
	}
	for i, o := range out.Outputs {
		lp, ok := o["logprobs"]
		if !ok {
			return fmt.Errorf("datum %d: no logprobs output", i)
		}
		in := infos[i]
		if len(lp) != len(req.Data[i].Tokens) {
			return fmt.Errorf("datum %d: %d logprobs for %d target tokens", i, len(lp), len(req.Data[i].Tokens))
		}
		for t, x := range lp {
			if math.IsNaN(x) || math.IsInf(x, 0) || x > 0 {
				return fmt.Errorf("datum %d: logprob %v at position %d", i, x, t)
			}
			if !in.mask[t] {
				continue
			}
			st.Tokens++
			if p.o.Loss == LossCrossEntropy {
				continue
			}
			*kl += in.behavior[t] - x
			if p.o.Loss == LossPPO {
				r := math.Exp(x - in.behavior[t])
				if r < 1-p.o.ClipLow || r > 1+p.o.ClipHigh {
					*clip++
				}
			}
		}
	}
	return nil
}

// Publish implements trainer.Policy: save_weights_for_sampler, whose
// path the engine samples from as version.
func (p *Policy) Publish(ctx context.Context, version int64) error {
	_, err := p.publish(ctx, version)
	return err
}

func (p *Policy) publish(ctx context.Context, version int64) (string, error) {
	if err := p.alive(); err != nil {
		return "", err
	}
	var r struct {
		Path string `json:"path"`
	}
	err := p.c.result(ctx, "/api/v1/save_weights_for_sampler", map[string]any{"model_id": p.modelID,
		"path": fmt.Sprintf("agl-v%d", version), "seq_id": p.nextSeq(), "type": "save_weights_for_sampler"}, &r)
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(r.Path, "tinker://") {
		return "", fmt.Errorf("tinker /api/v1/save_weights_for_sampler: malformed answer: path %q is not tinker://", r.Path)
	}
	p.eng.serve(r.Path, version)
	return r.Path, nil
}

// checkpointTimeout bounds a save_weights (SaveCheckpoint has no context).
const checkpointTimeout = 30 * time.Minute

// SaveCheckpoint implements trainer.Policy: save_weights (weights and
// optimizer state) on the service, its tinker:// path in dir/tinker.json.
func (p *Policy) SaveCheckpoint(dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), checkpointTimeout)
	defer cancel()
	_, err := p.saveState(ctx, dir)
	return err
}

// Save publishes the weights as version (save_weights_for_sampler) and
// checkpoints them with the optimizer state into dir (save_weights), and
// returns both tinker:// paths: the end of agl sft.
func (p *Policy) Save(ctx context.Context, dir string, version int64) (sampler, state string, err error) {
	if sampler, err = p.publish(ctx, version); err != nil {
		return "", "", err
	}
	state, err = p.saveState(ctx, dir)
	return sampler, state, err
}

func (p *Policy) saveState(ctx context.Context, dir string) (string, error) {
	if err := p.alive(); err != nil {
		return "", err
	}
	p.mu.Lock()
	p.saves++
	name := fmt.Sprintf("agl-state-%d", p.saves)
	p.mu.Unlock()
	var r struct {
		Path string `json:"path"`
	}
	err := p.c.result(ctx, "/api/v1/save_weights", map[string]any{"model_id": p.modelID,
		"path": name, "seq_id": p.nextSeq(), "overwrite": false, "type": "save_weights"}, &r)
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(r.Path, "tinker://") {
		return "", fmt.Errorf("tinker /api/v1/save_weights: malformed answer: path %q is not tinker://", r.Path)
	}
	b, _ := json.MarshalIndent(checkpoint{SDKVersion: SDKVersion, BaseModel: p.o.BaseModel, StatePath: r.Path}, "", "  ")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return r.Path, os.WriteFile(filepath.Join(dir, checkpointFile), b, 0o644)
}

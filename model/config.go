// Package model is agl's embedded decoder-only transformer: a
// Qwen2/Qwen3/Llama-architecture model (RMSNorm, RoPE, SwiGLU MLP,
// grouped-query attention, optional tied embeddings) built with GoMLX.
// Checkpoints are Hugging Face style: a config.json and safetensors weights
// with Hugging Face tensor names, so real checkpoints of those families load.
//
// The package offers teacher-forced log-probs and entropies (Model.LogProbs),
// a training step with AdamW for a supervised or a policy-gradient loss
// (Trainer), and a batching generation engine (Engine) implementing
// engine.TokenEngine.
//
// # Backends and speed
//
// The default backend is GoMLX's pure-Go one: generation schedules ops
// sequentially (DefaultBackend), training runs independent ops in parallel
// on an oversized worker pool (TrainBackend; the default pool size can
// deadlock). Matrix multiplications use all cores either way. Build with GOEXPERIMENT=simd (Go
// 1.26) for its AVX2/AVX-512 kernels: 3-7x faster training and decoding.
// The backend is configurable per Model ("xla:cuda" where a PJRT plugin is
// installed), or through $GOMLX_BACKEND.
//
// Linear-layer weights are kept transposed ([in, out]) on the backend; they
// are converted on Upload/Download, so files always use Hugging Face layout.
package model

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Config holds the Hugging Face config.json fields the architecture needs.
type Config struct {
	Architectures         []string `json:"architectures,omitempty"`
	ModelType             string   `json:"model_type"`
	VocabSize             int      `json:"vocab_size"`
	HiddenSize            int      `json:"hidden_size"`
	IntermediateSize      int      `json:"intermediate_size"`
	NumHiddenLayers       int      `json:"num_hidden_layers"`
	NumAttentionHeads     int      `json:"num_attention_heads"`
	NumKeyValueHeads      int      `json:"num_key_value_heads,omitempty"`
	HeadDim               int      `json:"head_dim,omitempty"`
	RMSNormEps            float64  `json:"rms_norm_eps"`
	RopeTheta             float64  `json:"rope_theta"`
	MaxPositionEmbeddings int      `json:"max_position_embeddings"`
	TieWordEmbeddings     bool     `json:"tie_word_embeddings"`
	// AttentionBias adds q/k/v/o biases (Llama option). Qwen2 always has
	// q/k/v biases; see QKVBias.
	AttentionBias bool `json:"attention_bias,omitempty"`
	// BosTokenID and EosTokenID are informational.
	BosTokenID any `json:"bos_token_id,omitempty"`
	EosTokenID any `json:"eos_token_id,omitempty"`
}

// Model types understood.
const (
	TypeQwen2 = "qwen2"
	TypeQwen3 = "qwen3"
	TypeLlama = "llama"
)

// ReadConfig reads a config.json file.
func ReadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("model config: %w", err)
	}
	c, err := DecodeConfig(b, 0)
	if err != nil {
		return c, fmt.Errorf("model config %s: %w", path, err)
	}
	return c, nil
}

// DecodeConfig parses config.json content, fills defaults (vocab_size 0
// becomes defaultVocab) and validates it.
func DecodeConfig(data []byte, defaultVocab int) (Config, error) {
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		return c, err
	}
	if c.VocabSize == 0 {
		c.VocabSize = defaultVocab
	}
	c.fillDefaults()
	return c, c.Validate()
}

// WriteConfig writes c as config.json in dir.
func WriteConfig(dir string, c Config) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("model config: %w", err)
	}
	return nil
}

func (c *Config) fillDefaults() {
	if c.ModelType == "" {
		c.ModelType = TypeQwen3
		for _, a := range c.Architectures {
			switch a {
			case "Qwen2ForCausalLM":
				c.ModelType = TypeQwen2
			case "LlamaForCausalLM", "MistralForCausalLM":
				c.ModelType = TypeLlama
			}
		}
	}
	if c.NumKeyValueHeads == 0 {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	if c.HeadDim == 0 && c.NumAttentionHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	if c.RMSNormEps == 0 {
		c.RMSNormEps = 1e-6
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	if c.MaxPositionEmbeddings == 0 {
		c.MaxPositionEmbeddings = 2048
	}
}

// Validate checks the sizes are consistent and the model type known.
func (c Config) Validate() error {
	switch c.ModelType {
	case TypeQwen2, TypeQwen3, TypeLlama:
	default:
		return fmt.Errorf("unsupported model_type %q (want qwen2, qwen3 or llama)", c.ModelType)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"vocab_size", c.VocabSize}, {"hidden_size", c.HiddenSize}, {"intermediate_size", c.IntermediateSize},
		{"num_hidden_layers", c.NumHiddenLayers}, {"num_attention_heads", c.NumAttentionHeads},
		{"num_key_value_heads", c.NumKeyValueHeads}, {"head_dim", c.HeadDim}} {
		if f.v <= 0 {
			return fmt.Errorf("%s must be > 0, got %d", f.name, f.v)
		}
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return fmt.Errorf("num_attention_heads %d not a multiple of num_key_value_heads %d", c.NumAttentionHeads, c.NumKeyValueHeads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("head_dim %d must be even for RoPE", c.HeadDim)
	}
	return nil
}

// QKNorm reports whether attention has per-head RMSNorm on q and k (Qwen3).
func (c Config) QKNorm() bool { return c.ModelType == TypeQwen3 }

// QKVBias reports whether q/k/v projections have biases (Qwen2, or Llama
// with attention_bias).
func (c Config) QKVBias() bool { return c.ModelType == TypeQwen2 || c.AttentionBias }

// OBias reports whether the output projection has a bias.
func (c Config) OBias() bool { return c.ModelType == TypeLlama && c.AttentionBias }

// ParamSpec names one weight tensor and its shape.
type ParamSpec struct {
	Name  string
	Shape []int
}

// Params lists the model's weight tensors in a fixed order, with Hugging
// Face names and shapes ([out, in] for linear layers).
func (c Config) Params() []ParamSpec {
	d, hd := c.HiddenSize, c.HeadDim
	q, kv := c.NumAttentionHeads*hd, c.NumKeyValueHeads*hd
	ps := []ParamSpec{{"model.embed_tokens.weight", []int{c.VocabSize, d}}}
	for i := range c.NumHiddenLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		ps = append(ps,
			ParamSpec{p + "input_layernorm.weight", []int{d}},
			ParamSpec{p + "self_attn.q_proj.weight", []int{q, d}},
			ParamSpec{p + "self_attn.k_proj.weight", []int{kv, d}},
			ParamSpec{p + "self_attn.v_proj.weight", []int{kv, d}},
			ParamSpec{p + "self_attn.o_proj.weight", []int{d, q}},
		)
		if c.QKVBias() {
			ps = append(ps,
				ParamSpec{p + "self_attn.q_proj.bias", []int{q}},
				ParamSpec{p + "self_attn.k_proj.bias", []int{kv}},
				ParamSpec{p + "self_attn.v_proj.bias", []int{kv}},
			)
		}
		if c.OBias() {
			ps = append(ps, ParamSpec{p + "self_attn.o_proj.bias", []int{d}})
		}
		if c.QKNorm() {
			ps = append(ps,
				ParamSpec{p + "self_attn.q_norm.weight", []int{hd}},
				ParamSpec{p + "self_attn.k_norm.weight", []int{hd}},
			)
		}
		ps = append(ps,
			ParamSpec{p + "post_attention_layernorm.weight", []int{d}},
			ParamSpec{p + "mlp.gate_proj.weight", []int{c.IntermediateSize, d}},
			ParamSpec{p + "mlp.up_proj.weight", []int{c.IntermediateSize, d}},
			ParamSpec{p + "mlp.down_proj.weight", []int{d, c.IntermediateSize}},
		)
	}
	ps = append(ps, ParamSpec{"model.norm.weight", []int{d}})
	if !c.TieWordEmbeddings {
		ps = append(ps, ParamSpec{"lm_head.weight", []int{c.VocabSize, d}})
	}
	return ps
}

// NumParams is the number of weights (tied embeddings counted once).
func (c Config) NumParams() int {
	n := 0
	for _, p := range c.Params() {
		n += prod(p.Shape)
	}
	return n
}

func prod(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// paramIndex maps names to positions in Params.
func (c Config) paramIndex() map[string]int {
	ps := c.Params()
	m := make(map[string]int, len(ps))
	for i, p := range ps {
		m[p.Name] = i
	}
	return m
}

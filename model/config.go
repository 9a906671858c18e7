// Package model is agl's embedded decoder-only transformer: a
// Qwen2/Qwen3/Llama/Mistral-architecture model (RMSNorm, RoPE, SwiGLU MLP,
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
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Config holds the Hugging Face config.json fields the architecture needs.
// DecodeConfig reads a config.json exactly: every field it does not know is
// an error naming it (see configFields), so a checkpoint never loads with
// silently different logits.
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
	// RopeScaling is the RoPE variant (nil: the default one). Both
	// rope_scaling and transformers-5 rope_parameters are read into it.
	RopeScaling *RopeScaling `json:"rope_scaling,omitempty"`
	// AttentionBias adds q/k/v/o biases (Llama and Qwen3 option). Qwen2
	// always has q/k/v biases; see QKVBias.
	AttentionBias bool `json:"attention_bias,omitempty"`
	// MLPBias adds gate/up/down biases (Llama option).
	MLPBias bool `json:"mlp_bias,omitempty"`
	// HiddenAct is the MLP activation; only silu is implemented.
	HiddenAct string `json:"hidden_act,omitempty"`
	// Sliding-window attention fields (Qwen2/Qwen3/Mistral). agl has no
	// sliding-window attention: a window that can bind bounds the sequence
	// length agl runs (MaxExactLength), within which full attention is
	// exactly what Hugging Face computes.
	UseSlidingWindow bool     `json:"use_sliding_window,omitempty"`
	SlidingWindow    *int     `json:"sliding_window"` // null: none
	MaxWindowLayers  int      `json:"max_window_layers,omitempty"`
	LayerTypes       []string `json:"layer_types,omitempty"`
	// BosTokenID and EosTokenID are informational.
	BosTokenID any `json:"bos_token_id,omitempty"`
	EosTokenID any `json:"eos_token_id,omitempty"`
}

// RopeScaling is a RoPE variant as Hugging Face's modeling_rope_utils
// computes it. Zero fields take transformers' defaults.
type RopeScaling struct {
	// RopeType is one of linear, dynamic, yarn, llama3.
	RopeType                      string  `json:"rope_type"`
	Factor                        float64 `json:"factor,omitempty"`
	OriginalMaxPositionEmbeddings int     `json:"original_max_position_embeddings,omitempty"`
	// llama3
	LowFreqFactor  float64 `json:"low_freq_factor,omitempty"`
	HighFreqFactor float64 `json:"high_freq_factor,omitempty"`
	// yarn
	BetaFast        float64 `json:"beta_fast,omitempty"`
	BetaSlow        float64 `json:"beta_slow,omitempty"`
	AttentionFactor float64 `json:"attention_factor,omitempty"`
	Mscale          float64 `json:"mscale,omitempty"`
	MscaleAllDim    float64 `json:"mscale_all_dim,omitempty"`
	Truncate        *bool   `json:"truncate,omitempty"`
}

// Model types understood. Mistral is the Llama architecture without biases.
const (
	TypeQwen2   = "qwen2"
	TypeQwen3   = "qwen3"
	TypeLlama   = "llama"
	TypeMistral = "mistral"
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

// configFields are the config.json fields DecodeConfig reads into Config.
var configFields = map[string]bool{
	"architectures": true, "model_type": true, "vocab_size": true, "hidden_size": true, "intermediate_size": true,
	"num_hidden_layers": true, "num_attention_heads": true, "num_key_value_heads": true, "head_dim": true,
	"rms_norm_eps": true, "rope_theta": true, "max_position_embeddings": true, "tie_word_embeddings": true,
	"rope_scaling": true, "rope_parameters": true, "attention_bias": true, "mlp_bias": true, "hidden_act": true,
	"use_sliding_window": true, "sliding_window": true, "max_window_layers": true, "layer_types": true,
	"bos_token_id": true, "eos_token_id": true, "partial_rotary_factor": true, "use_mrope": true,
}

// ignoredFields do not change the model's logits: bookkeeping, training-only
// settings (dropout, initialisation) and generation defaults that
// PretrainedConfig writes into older config.json files.
var ignoredFields = map[string]bool{
	"_name_or_path": true, "transformers_version": true, "torch_dtype": true, "dtype": true, "use_cache": true,
	"initializer_range": true, "pad_token_id": true, "attention_dropout": true, "pretraining_tp": true,
	"output_attentions": true, "output_hidden_states": true, "return_dict": true, "torchscript": true,
	"is_encoder_decoder": true, "is_decoder": true, "add_cross_attention": true, "id2label": true, "label2id": true,
	"tokenizer_class": true, "task_specific_params": true, "problem_type": true, "chunk_size_feed_forward": true,
	"prefix": true, "sep_token_id": true, "decoder_start_token_id": true, "finetuning_task": true,
	"tf_legacy_loss": true, "use_bfloat16": true, "cross_attention_hidden_size": true, "tie_encoder_decoder": true,
	"pruned_heads": true, "max_length": true, "min_length": true, "do_sample": true,
	"early_stopping": true, "num_beams": true, "num_beam_groups": true, "diversity_penalty": true,
	"temperature": true, "top_k": true, "top_p": true, "typical_p": true, "repetition_penalty": true,
	"length_penalty": true, "no_repeat_ngram_size": true, "encoder_no_repeat_ngram_size": true,
	"bad_words_ids": true, "num_return_sequences": true, "output_scores": true,
	"return_dict_in_generate": true, "forced_bos_token_id": true, "forced_eos_token_id": true,
	"remove_invalid_values": true, "exponential_decay_length_penalty": true, "suppress_tokens": true,
	"begin_suppress_tokens": true,
}

// DecodeConfig parses config.json content as transformers reads it: missing
// fields take the architecture's Hugging Face defaults (vocab_size 0 becomes
// defaultVocab), and a field agl does not implement is an error naming it.
func DecodeConfig(data []byte, defaultVocab int) (Config, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return Config{}, err
	}
	var unknown []string
	present := make(map[string]bool, len(raw)) // null included
	for k, v := range raw {
		present[k] = true
		if string(v) == "null" {
			delete(raw, k)
			continue
		}
		if !configFields[k] && !ignoredFields[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return Config{}, fmt.Errorf("config field(s) %s not supported by agl's model (they may change the logits)", strings.Join(unknown, ", "))
	}
	var c Config
	body, _ := json.Marshal(raw) // nulls dropped
	if err := json.Unmarshal(body, &c); err != nil {
		return c, err
	}
	// Fields Config does not keep as they are.
	c.RopeScaling = nil
	if c.ModelType == "" {
		c.ModelType = typeFromArchitectures(c.Architectures)
	}
	switch c.ModelType {
	case TypeQwen2, TypeQwen3, TypeLlama, TypeMistral:
	default:
		return c, fmt.Errorf("unsupported model_type %q (want qwen2, qwen3, llama or mistral)", c.ModelType)
	}
	if v, ok := raw["partial_rotary_factor"]; ok {
		if f, err := strconv.ParseFloat(string(v), 64); err != nil || f != 1 {
			return c, fmt.Errorf("partial_rotary_factor %s not supported (only 1)", v)
		}
	}
	if v, ok := raw["use_mrope"]; ok && string(v) != "false" {
		return c, fmt.Errorf("use_mrope %s not supported", v)
	}
	theta, rs, err := decodeRope(raw["rope_scaling"], raw["rope_parameters"])
	if err != nil {
		return c, err
	}
	if theta != 0 {
		if _, ok := raw["rope_theta"]; ok && c.RopeTheta != theta {
			return c, fmt.Errorf("rope_theta %v and rope_parameters.rope_theta %v disagree", c.RopeTheta, theta)
		}
		c.RopeTheta = theta
	}
	c.RopeScaling = rs
	// Hugging Face's per-architecture defaults for absent fields.
	if _, ok := raw["head_dim"]; !ok && c.ModelType == TypeQwen3 {
		c.HeadDim = 128 // Qwen3Config.head_dim
	}
	if _, ok := raw["num_key_value_heads"]; !ok {
		switch c.ModelType {
		case TypeQwen2, TypeQwen3:
			c.NumKeyValueHeads = 32
		case TypeMistral:
			c.NumKeyValueHeads = 8
		}
	}
	if _, ok := raw["max_position_embeddings"]; !ok {
		switch c.ModelType {
		case TypeQwen2, TypeQwen3:
			c.MaxPositionEmbeddings = 32768
		case TypeMistral:
			c.MaxPositionEmbeddings = 4096 * 32
		}
	}
	if !present["sliding_window"] {
		switch c.ModelType {
		case TypeQwen2, TypeQwen3, TypeMistral:
			w := 4096
			c.SlidingWindow = &w
		}
	}
	if _, ok := raw["max_window_layers"]; !ok && (c.ModelType == TypeQwen2 || c.ModelType == TypeQwen3) {
		c.MaxWindowLayers = 28
	}
	if c.VocabSize == 0 {
		c.VocabSize = defaultVocab
	}
	c.fillDefaults()
	return c, c.Validate()
}

func typeFromArchitectures(archs []string) string {
	for _, a := range archs {
		switch a {
		case "Qwen2ForCausalLM":
			return TypeQwen2
		case "Qwen3ForCausalLM":
			return TypeQwen3
		case "LlamaForCausalLM":
			return TypeLlama
		case "MistralForCausalLM":
			return TypeMistral
		}
	}
	return TypeQwen3
}

// ropeFields are the keys of rope_scaling / rope_parameters agl reads.
var ropeFields = map[string]bool{
	"rope_type": true, "type": true, "rope_theta": true, "factor": true, "original_max_position_embeddings": true,
	"low_freq_factor": true, "high_freq_factor": true, "beta_fast": true, "beta_slow": true,
	"attention_factor": true, "mscale": true, "mscale_all_dim": true, "truncate": true, "partial_rotary_factor": true,
}

// decodeRope reads rope_scaling (transformers 4) and rope_parameters
// (transformers 5, which also holds rope_theta). It returns rope_theta from
// rope_parameters (0 if none) and the variant (nil for the default one).
func decodeRope(scaling, params json.RawMessage) (theta float64, rs *RopeScaling, err error) {
	var parts []map[string]json.RawMessage
	for _, f := range []struct {
		name string
		v    json.RawMessage
	}{{"rope_scaling", scaling}, {"rope_parameters", params}} {
		if len(f.v) == 0 {
			continue
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(f.v, &m); err != nil {
			return 0, nil, fmt.Errorf("%s: %w", f.name, err)
		}
		var unknown []string
		for k := range m {
			if !ropeFields[k] {
				unknown = append(unknown, f.name+"."+k)
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			return 0, nil, fmt.Errorf("%s not supported (per-layer-type RoPE and other fields are not implemented)", strings.Join(unknown, ", "))
		}
		if v, ok := m["partial_rotary_factor"]; ok && string(v) != "1" && string(v) != "1.0" {
			return 0, nil, fmt.Errorf("%s.partial_rotary_factor %s not supported (only 1)", f.name, v)
		}
		if v, ok := m["rope_theta"]; ok {
			if err := json.Unmarshal(v, &theta); err != nil {
				return 0, nil, fmt.Errorf("%s.rope_theta: %w", f.name, err)
			}
		}
		parts = append(parts, m)
	}
	if len(parts) == 0 {
		return theta, nil, nil
	}
	if len(parts) == 2 && !jsonEqualExcept(parts[0], parts[1], "rope_theta") {
		return 0, nil, errors.New("rope_scaling and rope_parameters disagree")
	}
	m := parts[len(parts)-1]
	var s RopeScaling
	b, _ := json.Marshal(m)
	if err := json.Unmarshal(b, &s); err != nil {
		return 0, nil, fmt.Errorf("rope_scaling: %w", err)
	}
	if s.RopeType == "" {
		var legacy string
		if v, ok := m["type"]; ok {
			if err := json.Unmarshal(v, &legacy); err != nil {
				return 0, nil, fmt.Errorf("rope_scaling.type: %w", err)
			}
		}
		s.RopeType = legacy
	}
	if s.RopeType == "" || s.RopeType == "default" {
		for _, k := range []string{"factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor",
			"beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim", "truncate"} {
			if _, ok := m[k]; ok {
				return 0, nil, fmt.Errorf("rope_scaling.%s given with the default rope_type", k)
			}
		}
		return theta, nil, nil
	}
	return theta, &s, s.validate()
}

func jsonEqualExcept(a, b map[string]json.RawMessage, skip string) bool {
	norm := func(m map[string]json.RawMessage) string {
		c := map[string]any{}
		for k, v := range m {
			if k == skip {
				continue
			}
			var x any
			_ = json.Unmarshal(v, &x)
			if k == "type" {
				k = "rope_type"
			}
			c[k] = x
		}
		out, _ := json.Marshal(c)
		return string(out)
	}
	return norm(a) == norm(b)
}

func (s *RopeScaling) validate() error {
	switch s.RopeType {
	case "linear", "dynamic", "yarn":
	case "llama3":
		if s.LowFreqFactor <= 0 || s.HighFreqFactor <= s.LowFreqFactor || s.OriginalMaxPositionEmbeddings <= 0 {
			return fmt.Errorf("rope_scaling llama3 needs low_freq_factor > 0, high_freq_factor > low_freq_factor and original_max_position_embeddings, got %v, %v, %d",
				s.LowFreqFactor, s.HighFreqFactor, s.OriginalMaxPositionEmbeddings)
		}
	default:
		return fmt.Errorf("rope_scaling rope_type %q not supported (default, linear, dynamic, yarn, llama3)", s.RopeType)
	}
	if s.Factor < 1 {
		return fmt.Errorf("rope_scaling %s factor must be >= 1, got %v", s.RopeType, s.Factor)
	}
	return nil
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

// fillDefaults completes a Config built in Go (DecodeConfig has applied
// Hugging Face's per-architecture defaults before).
func (c *Config) fillDefaults() {
	if c.ModelType == "" {
		c.ModelType = typeFromArchitectures(c.Architectures)
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
	if c.HiddenAct == "" {
		c.HiddenAct = "silu"
	}
}

// Validate checks the sizes are consistent and the model type known.
func (c Config) Validate() error {
	switch c.ModelType {
	case TypeQwen2, TypeQwen3, TypeLlama, TypeMistral:
	default:
		return fmt.Errorf("unsupported model_type %q (want qwen2, qwen3, llama or mistral)", c.ModelType)
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
	switch c.HiddenAct {
	case "silu", "swish", "":
	default:
		return fmt.Errorf("hidden_act %q not supported (only silu)", c.HiddenAct)
	}
	if c.RopeScaling != nil {
		if err := c.RopeScaling.validate(); err != nil {
			return err
		}
	}
	if c.LayerTypes != nil {
		if len(c.LayerTypes) != c.NumHiddenLayers {
			return fmt.Errorf("layer_types has %d entries for %d layers", len(c.LayerTypes), c.NumHiddenLayers)
		}
		for i, t := range c.LayerTypes {
			if t != "full_attention" && t != "sliding_attention" {
				return fmt.Errorf("layer_types[%d] %q not supported (full_attention, sliding_attention)", i, t)
			}
		}
	}
	if w := c.AttentionWindow(); w == 0 {
		return fmt.Errorf("sliding_window must be > 0")
	}
	return nil
}

// AttentionWindow is the sliding-window size Hugging Face applies to some
// layers of this config, or -1 when every layer attends to the whole
// sequence. Qwen2/Qwen3 use sliding_window only with use_sliding_window
// (on layers from max_window_layers on, or those layer_types marks);
// Mistral uses it on every layer whenever it is set.
func (c Config) AttentionWindow() int {
	if c.SlidingWindow == nil {
		return -1
	}
	switch c.ModelType {
	case TypeMistral:
		return *c.SlidingWindow
	case TypeQwen2, TypeQwen3:
		if !c.UseSlidingWindow {
			return -1
		}
		for i := range c.NumHiddenLayers {
			sliding := i >= c.MaxWindowLayers
			if c.LayerTypes != nil {
				sliding = c.LayerTypes[i] == "sliding_attention"
			}
			if sliding {
				return *c.SlidingWindow
			}
		}
	}
	return -1
}

// MaxExactLength is the longest sequence (in tokens) on which agl computes
// what Hugging Face computes for this config, or 0 for no bound: a sliding
// window longer sequences would slide (agl attends to everything), or
// dynamic RoPE, which changes its frequencies beyond the original
// max_position_embeddings.
func (c Config) MaxExactLength() int {
	n := 0
	if w := c.AttentionWindow(); w > 0 {
		n = w
	}
	if rs := c.RopeScaling; rs != nil && rs.RopeType == "dynamic" {
		l := c.MaxPositionEmbeddings
		if rs.OriginalMaxPositionEmbeddings > 0 {
			l = rs.OriginalMaxPositionEmbeddings
		}
		if n == 0 || l < n {
			n = l
		}
	}
	return n
}

// isLlama reports the Llama architecture family (Llama, Mistral).
func (c Config) isLlama() bool { return c.ModelType == TypeLlama || c.ModelType == TypeMistral }

// QKNorm reports whether attention has per-head RMSNorm on q and k (Qwen3).
func (c Config) QKNorm() bool { return c.ModelType == TypeQwen3 }

// QKVBias reports whether q/k/v projections have biases (Qwen2 always;
// Llama and Qwen3 with attention_bias; Mistral never).
func (c Config) QKVBias() bool {
	return c.ModelType == TypeQwen2 || (c.AttentionBias && (c.ModelType == TypeLlama || c.ModelType == TypeQwen3))
}

// OBias reports whether the output projection has a bias (Llama and Qwen3
// with attention_bias).
func (c Config) OBias() bool {
	return c.AttentionBias && (c.ModelType == TypeLlama || c.ModelType == TypeQwen3)
}

// MLPBiased reports whether the MLP projections have biases (Llama with
// mlp_bias).
func (c Config) MLPBiased() bool { return c.MLPBias && c.ModelType == TypeLlama }

// ropeInvFreq returns RoPE's inverse frequencies (head_dim/2 of them) and
// the factor cos and sin are scaled by, as modeling_rope_utils computes
// them for the config's rope type. Dynamic RoPE is the default one on
// sequences up to its original length (MaxExactLength).
func (c Config) ropeInvFreq() (inv []float64, attention float64) {
	hd := c.HeadDim
	half := hd / 2
	base := c.RopeTheta
	inv = make([]float64, half)
	for i := range inv {
		inv[i] = 1 / math.Pow(base, float64(2*i)/float64(hd))
	}
	rs := c.RopeScaling
	if rs == nil {
		return inv, 1
	}
	switch rs.RopeType {
	case "linear":
		for i := range inv {
			inv[i] /= rs.Factor
		}
	case "llama3":
		old := float64(rs.OriginalMaxPositionEmbeddings)
		lowWave, highWave := old/rs.LowFreqFactor, old/rs.HighFreqFactor
		for i, f := range inv {
			wave := 2 * math.Pi / f
			switch {
			case wave < highWave: // high frequency: kept
			case wave > lowWave: // low frequency: scaled
				inv[i] = f / rs.Factor
			default:
				smooth := (old/wave - rs.LowFreqFactor) / (rs.HighFreqFactor - rs.LowFreqFactor)
				inv[i] = (1-smooth)*f/rs.Factor + smooth*f
			}
		}
	case "yarn":
		orig := float64(c.MaxPositionEmbeddings)
		if rs.OriginalMaxPositionEmbeddings > 0 {
			orig = float64(rs.OriginalMaxPositionEmbeddings)
		}
		mscale := func(scale, m float64) float64 {
			if scale <= 1 {
				return 1
			}
			return 0.1*m*math.Log(scale) + 1
		}
		attention = rs.AttentionFactor
		if attention == 0 {
			if rs.Mscale != 0 && rs.MscaleAllDim != 0 {
				attention = mscale(rs.Factor, rs.Mscale) / mscale(rs.Factor, rs.MscaleAllDim)
			} else {
				attention = mscale(rs.Factor, 1)
			}
		}
		fast, slow := rs.BetaFast, rs.BetaSlow
		if fast == 0 {
			fast = 32
		}
		if slow == 0 {
			slow = 1
		}
		dim := float64(hd)
		corr := func(rot float64) float64 { return dim * math.Log(orig/(rot*2*math.Pi)) / (2 * math.Log(base)) }
		low, high := corr(fast), corr(slow)
		if rs.Truncate == nil || *rs.Truncate {
			low, high = math.Floor(low), math.Ceil(high)
		}
		low, high = math.Max(low, 0), math.Min(high, dim-1)
		if low == high {
			high += 0.001
		}
		for i, f := range inv {
			ramp := math.Min(math.Max((float64(i)-low)/(high-low), 0), 1)
			extra := 1 - ramp
			inv[i] = f/rs.Factor*(1-extra) + f*extra
		}
		return inv, attention
	}
	return inv, 1
}

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
		if c.MLPBiased() {
			ps = append(ps,
				ParamSpec{p + "mlp.gate_proj.bias", []int{c.IntermediateSize}},
				ParamSpec{p + "mlp.up_proj.bias", []int{c.IntermediateSize}},
				ParamSpec{p + "mlp.down_proj.bias", []int{d}},
			)
		}
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

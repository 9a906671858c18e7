package model

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestPresetSizes(t *testing.T) {
	tests := []struct {
		name     string
		min, max int
	}{{"tiny", 20e3, 200e3}, {"1m", 0.5e6, 1e6}, {"10m", 8e6, 12e6}, {"30m", 25e6, 35e6}}
	for _, tc := range tests {
		c, err := Preset(tc.name, 265)
		if err != nil {
			t.Fatal(err)
		}
		if n := c.NumParams(); n < tc.min || n > tc.max {
			t.Errorf("%s: %d parameters, want [%d, %d]", tc.name, n, tc.min, tc.max)
		}
	}
	if _, err := Preset("huge", 10); err == nil {
		t.Error("unknown preset: no error")
	}
}

func TestReadConfigHuggingFace(t *testing.T) {
	tests := []struct {
		name, json string
		wantType   string
		qkNorm     bool
		bias       bool
		nParams    int
	}{
		{"qwen3", `{"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3","vocab_size":10,"hidden_size":8,"intermediate_size":16,
			"num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":4,"rms_norm_eps":1e-6,
			"rope_theta":1000000,"max_position_embeddings":4096,"tie_word_embeddings":true,"torch_dtype":"bfloat16"}`, TypeQwen3, true, false,
			10*8 + 8 + 8*8 + 4*8 + 4*8 + 8*8 + 4 + 4 + 8 + 3*16*8 + 8},
		{"qwen2", `{"architectures":["Qwen2ForCausalLM"],"vocab_size":10,"hidden_size":8,"intermediate_size":16,
			"num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":2,"rms_norm_eps":1e-6,"tie_word_embeddings":false}`, TypeQwen2, false, true,
			2*10*8 + 8 + 4*8*8 + 3*8 + 8 + 3*16*8 + 8},
		{"llama", `{"architectures":["LlamaForCausalLM"],"model_type":"llama","vocab_size":10,"hidden_size":8,"intermediate_size":16,
			"num_hidden_layers":1,"num_attention_heads":2,"rms_norm_eps":1e-5}`, TypeLlama, false, false,
			2*10*8 + 8 + 4*8*8 + 8 + 3*16*8 + 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "config.json")
			if err := os.WriteFile(p, []byte(tc.json), 0o644); err != nil {
				t.Fatal(err)
			}
			c, err := ReadConfig(p)
			if err != nil {
				t.Fatal(err)
			}
			if c.ModelType != tc.wantType || c.QKNorm() != tc.qkNorm || c.QKVBias() != tc.bias {
				t.Errorf("type %s qknorm %v bias %v", c.ModelType, c.QKNorm(), c.QKVBias())
			}
			if c.HeadDim != 4 {
				t.Errorf("head_dim %d", c.HeadDim)
			}
			if n := c.NumParams(); n != tc.nParams {
				t.Errorf("%d parameters, want %d", n, tc.nParams)
			}
		})
	}
	p := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(p, []byte(`{"model_type":"gpt2","vocab_size":1}`), 0o644)
	if _, err := ReadConfig(p); err == nil {
		t.Error("gpt2 accepted")
	}
}

// hfConfig is a valid tiny config.json with fields overridden (nil
// deletes a field).
func hfConfig(t *testing.T, modelType string, over map[string]any) []byte {
	t.Helper()
	c := map[string]any{"model_type": modelType, "vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
		"num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
		"rms_norm_eps": 1e-6, "rope_theta": 10000, "max_position_embeddings": 4096}
	for k, v := range over {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeConfigFields(t *testing.T) {
	tests := []struct {
		name      string
		modelType string
		over      map[string]any
		check     func(c Config) bool
		wantErr   string
	}{
		{"qwen3 head_dim default 128", TypeQwen3, map[string]any{"head_dim": nil},
			func(c Config) bool { return c.HeadDim == 128 }, ""},
		{"llama head_dim default hidden/heads", TypeLlama, map[string]any{"head_dim": nil},
			func(c Config) bool { return c.HeadDim == 4 }, ""},
		{"qwen2 num_key_value_heads default 32", TypeQwen2, map[string]any{"num_key_value_heads": nil, "num_attention_heads": 32, "head_dim": 2},
			func(c Config) bool { return c.NumKeyValueHeads == 32 }, ""},
		{"llama num_key_value_heads default heads", TypeLlama, map[string]any{"num_key_value_heads": nil},
			func(c Config) bool { return c.NumKeyValueHeads == 2 }, ""},
		{"rope_parameters rope_theta only", TypeQwen3, map[string]any{"rope_theta": nil, "rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1e6}},
			func(c Config) bool { return c.RopeTheta == 1e6 && c.RopeScaling == nil }, ""},
		{"rope_parameters and rope_theta disagree", TypeQwen3, map[string]any{"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1e6}},
			nil, "rope_theta 10000 and rope_parameters.rope_theta 1e+06 disagree"},
		{"rope_parameters yarn", TypeQwen3, map[string]any{"rope_parameters": map[string]any{"rope_type": "yarn", "rope_theta": 10000, "factor": 4, "original_max_position_embeddings": 1024}},
			func(c Config) bool {
				return c.RopeScaling.RopeType == "yarn" && c.RopeScaling.Factor == 4 && c.RopeScaling.OriginalMaxPositionEmbeddings == 1024
			}, ""},
		{"legacy rope_scaling type", TypeLlama, map[string]any{"rope_scaling": map[string]any{"type": "linear", "factor": 2}},
			func(c Config) bool { return c.RopeScaling.RopeType == "linear" }, ""},
		{"rope_scaling null", TypeLlama, map[string]any{"rope_scaling": nil},
			func(c Config) bool { return c.RopeScaling == nil }, ""},
		{"rope_scaling longrope", TypeLlama, map[string]any{"rope_scaling": map[string]any{"rope_type": "longrope", "factor": 2}},
			nil, `rope_type "longrope" not supported`},
		{"rope_scaling unknown key", TypeLlama, map[string]any{"rope_scaling": map[string]any{"rope_type": "linear", "factor": 2, "short_factor": []int{1}}},
			nil, "rope_scaling.short_factor not supported"},
		{"per-layer-type rope_parameters", TypeQwen3, map[string]any{"rope_parameters": map[string]any{"full_attention": map[string]any{"rope_theta": 1e6}}},
			nil, "rope_parameters.full_attention not supported"},
		{"llama3 without its fields", TypeLlama, map[string]any{"rope_scaling": map[string]any{"rope_type": "llama3", "factor": 8}},
			nil, "llama3 needs"},
		{"rope factor below 1", TypeLlama, map[string]any{"rope_scaling": map[string]any{"rope_type": "linear", "factor": 0.5}},
			nil, "factor must be >= 1"},
		{"hidden_act gelu", TypeLlama, map[string]any{"hidden_act": "gelu"}, nil, `hidden_act "gelu" not supported`},
		{"partial_rotary_factor", TypeLlama, map[string]any{"partial_rotary_factor": 0.5}, nil, "partial_rotary_factor 0.5 not supported"},
		{"unknown field", TypeQwen3, map[string]any{"num_experts": 8, "quantization_config": map[string]any{}},
			nil, "config field(s) num_experts, quantization_config not supported"},
		{"informational fields", TypeQwen3, map[string]any{"torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true, "attention_dropout": 0.0},
			func(c Config) bool { return true }, ""},
		{"qwen sliding window off", TypeQwen3, map[string]any{"use_sliding_window": false, "sliding_window": 4096, "max_window_layers": 28},
			func(c Config) bool { return c.AttentionWindow() == -1 && c.MaxExactLength() == 0 }, ""},
		{"qwen sliding window on past max_window_layers", TypeQwen2, map[string]any{"use_sliding_window": true, "sliding_window": 1024, "max_window_layers": 1},
			func(c Config) bool { return c.AttentionWindow() == 1024 && c.MaxExactLength() == 1024 }, ""},
		{"qwen sliding window on, no layer slides", TypeQwen2, map[string]any{"use_sliding_window": true, "sliding_window": 1024, "max_window_layers": 28},
			func(c Config) bool { return c.AttentionWindow() == -1 }, ""},
		{"qwen layer_types", TypeQwen3, map[string]any{"use_sliding_window": true, "sliding_window": 512, "layer_types": []string{"full_attention", "sliding_attention"}},
			func(c Config) bool { return c.MaxExactLength() == 512 }, ""},
		{"layer_types unknown", TypeQwen3, map[string]any{"layer_types": []string{"full_attention", "linear_attention"}},
			nil, `layer_types[1] "linear_attention" not supported`},
		{"mistral sliding window default 4096", TypeMistral, map[string]any{},
			func(c Config) bool { return c.MaxExactLength() == 4096 && !c.QKVBias() && !c.QKNorm() }, ""},
		{"mistral sliding window null", TypeMistral, map[string]any{"sliding_window": json.RawMessage("null")},
			func(c Config) bool {
				return c.MaxExactLength() == 0
			}, ""},
		{"dynamic rope bounds length", TypeLlama, map[string]any{"rope_scaling": map[string]any{"rope_type": "dynamic", "factor": 2}},
			func(c Config) bool { return c.MaxExactLength() == 4096 }, ""},
		{"qwen3 attention_bias biases o_proj", TypeQwen3, map[string]any{"attention_bias": true},
			func(c Config) bool { return c.QKVBias() && c.OBias() }, ""},
		{"qwen2 q/k/v bias only", TypeQwen2, map[string]any{},
			func(c Config) bool { return c.QKVBias() && !c.OBias() }, ""},
		{"llama mlp_bias", TypeLlama, map[string]any{"mlp_bias": true},
			func(c Config) bool { return c.MLPBiased() }, ""},
		{"mistral architecture", "", map[string]any{"model_type": nil, "architectures": []string{"MistralForCausalLM"}},
			func(c Config) bool { return c.ModelType == TypeMistral }, ""},
		{"truncate false", TypeQwen3, map[string]any{"rope_scaling": map[string]any{"rope_type": "yarn", "factor": 2, "truncate": false}},
			func(c Config) bool { return c.RopeScaling.Truncate != nil && !*c.RopeScaling.Truncate }, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := DecodeConfig(hfConfig(t, tc.modelType, tc.over), 0)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c) {
				t.Errorf("config %+v", c)
			}
			// What WriteConfig writes reads back the same.
			dir := t.TempDir()
			if err := WriteConfig(dir, c); err != nil {
				t.Fatal(err)
			}
			back, err := ReadConfig(filepath.Join(dir, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, c) {
				t.Errorf("round trip:\n%+v\n%+v", back, c)
			}
		})
	}
}

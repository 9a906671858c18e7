package model

import (
	"os"
	"path/filepath"
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

package model

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/aglrl/agl/model/safetensors"
)

// writeBF16 writes tensors as BF16 safetensors, the way Hugging Face
// checkpoints usually are (rounded to nearest even).
func writeBF16(t *testing.T, path string, ts map[string]safetensors.Tensor) {
	t.Helper()
	names := make([]string, 0, len(ts))
	for n := range ts {
		names = append(names, n)
	}
	sort.Strings(names)
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var data []byte
	for _, n := range names {
		begin := len(data)
		for _, v := range ts[n].Data {
			data = binary.LittleEndian.AppendUint16(data, toBF16(v))
		}
		header[n] = map[string]any{"dtype": "BF16", "shape": ts[n].Shape, "data_offsets": []int{begin, len(data)}}
	}
	h, _ := json.Marshal(header)
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(h)))
	b.Write(h)
	b.Write(data)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeIndex writes model.safetensors.index.json for shards (file → tensors).
func writeIndex(t *testing.T, dir string, shards map[string]map[string]safetensors.Tensor) {
	t.Helper()
	wm := map[string]string{}
	for f, ts := range shards {
		for n := range ts {
			wm[n] = f
		}
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": wm})
	if err := os.WriteFile(filepath.Join(dir, IndexFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func toBF16(v float32) uint16 {
	u := math.Float32bits(v)
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// TestLoadHuggingFaceBF16Sharded loads a Qwen3-layout checkpoint stored as
// BF16 in two shards without lm_head (tied), as Hugging Face writes them.
func TestLoadHuggingFaceBF16Sharded(t *testing.T) {
	cfg := tinyConfig(TypeQwen3)
	w, err := NewRandom(cfg, 5)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := WriteConfig(dir, cfg); err != nil {
		t.Fatal(err)
	}
	named := w.Named()
	shard1, shard2 := map[string]safetensors.Tensor{}, map[string]safetensors.Tensor{}
	i := 0
	for n, x := range named {
		if i%2 == 0 {
			shard1[n] = x
		} else {
			shard2[n] = x
		}
		i++
	}
	writeBF16(t, filepath.Join(dir, "model-00001-of-00002.safetensors"), shard1)
	writeBF16(t, filepath.Join(dir, "model-00002-of-00002.safetensors"), shard2)
	writeIndex(t, dir, map[string]map[string]safetensors.Tensor{
		"model-00001-of-00002.safetensors": shard1, "model-00002-of-00002.safetensors": shard2})
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for k, spec := range cfg.Params() {
		for j, v := range w.Tensors[k].Data {
			want := math.Float32frombits(uint32(toBF16(v)) << 16)
			if got.Tensors[k].Data[j] != want {
				t.Fatalf("%s[%d] = %v, want bf16 %v", spec.Name, j, got.Tensors[k].Data[j], want)
			}
		}
	}
	m, err := New(got.Config, "")
	if err != nil {
		t.Fatal(err)
	}
	d, err := m.Upload(got)
	if err != nil {
		t.Fatal(err)
	}
	lp, _, err := m.LogProbs(context.Background(), d, [][]int32{{1, 2, 3, 4}})
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := referenceLogProbs(got, []int32{1, 2, 3, 4})
	for j := range ref {
		if math.Abs(float64(lp[0][j]-ref[j])) > 1e-4 {
			t.Errorf("token %d: %v vs reference %v", j, lp[0][j], ref[j])
		}
	}
	// A missing shard leaves tensors missing: an error.
	os.Remove(filepath.Join(dir, "model-00002-of-00002.safetensors"))
	if _, err := Load(dir); err == nil {
		t.Error("missing shard: no error")
	}
}

// TestLoadReadsExactly checks what Load reads: the shard index's files (not
// every *.safetensors in the folder), and only tensors the config uses.
func TestLoadReadsExactly(t *testing.T) {
	cfg := tinyConfig(TypeQwen3) // tied embeddings
	w, err := NewRandom(cfg, 6)
	if err != nil {
		t.Fatal(err)
	}
	named := w.Named()
	extra := safetensors.Tensor{Shape: []int{2}, Data: []float32{1, 2}}
	with := func(k string, v safetensors.Tensor) map[string]safetensors.Tensor {
		m := map[string]safetensors.Tensor{}
		for n, x := range named {
			m[n] = x
		}
		m[k] = v
		return m
	}
	differentHead := safetensors.Tensor{Shape: named["model.embed_tokens.weight"].Shape, Data: make([]float32, len(named["model.embed_tokens.weight"].Data))}
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string)
		wantErr string
	}{
		{"single file, stray adapter ignored", func(t *testing.T, dir string) {
			writeBF16(t, filepath.Join(dir, WeightsFile), named)
			writeBF16(t, filepath.Join(dir, "adapter_model.safetensors"), map[string]safetensors.Tensor{"x": extra})
		}, ""},
		{"sharded, stray file ignored", func(t *testing.T, dir string) {
			writeBF16(t, filepath.Join(dir, "a.safetensors"), named)
			writeIndex(t, dir, map[string]map[string]safetensors.Tensor{"a.safetensors": named})
			writeBF16(t, filepath.Join(dir, "old.safetensors"), map[string]safetensors.Tensor{"model.norm.weight": extra})
		}, ""},
		{"tied lm_head equal to the embeddings", func(t *testing.T, dir string) {
			writeBF16(t, filepath.Join(dir, WeightsFile), with("lm_head.weight", named["model.embed_tokens.weight"]))
		}, ""},
		{"tied lm_head different", func(t *testing.T, dir string) {
			writeBF16(t, filepath.Join(dir, WeightsFile), with("lm_head.weight", differentHead))
		}, "lm_head.weight differs"},
		{"rotary inv_freq buffer ignored", func(t *testing.T, dir string) {
			writeBF16(t, filepath.Join(dir, WeightsFile), with("model.layers.0.self_attn.rotary_emb.inv_freq", extra))
		}, ""},
		{"unused tensor", func(t *testing.T, dir string) {
			writeBF16(t, filepath.Join(dir, WeightsFile), with("model.layers.0.self_attn.o_proj.bias", extra))
		}, "checkpoint tensor(s) model.layers.0.self_attn.o_proj.bias not used"},
		{"no weights", func(t *testing.T, dir string) {
			writeBF16(t, filepath.Join(dir, "model-00001-of-00001.safetensors"), named)
		}, "no model.safetensors or model.safetensors.index.json"},
		{"tensor outside the index", func(t *testing.T, dir string) {
			writeBF16(t, filepath.Join(dir, "a.safetensors"), with("stray", extra))
			writeIndex(t, dir, map[string]map[string]safetensors.Tensor{"a.safetensors": named})
		}, "tensor stray in a.safetensors is not in model.safetensors.index.json"},
		{"index names a missing tensor", func(t *testing.T, dir string) {
			writeBF16(t, filepath.Join(dir, "a.safetensors"), named)
			writeIndex(t, dir, map[string]map[string]safetensors.Tensor{"a.safetensors": with("ghost", extra)})
		}, "tensor ghost missing from a.safetensors"},
		{"index escapes the directory", func(t *testing.T, dir string) {
			writeIndex(t, dir, map[string]map[string]safetensors.Tensor{"../a.safetensors": named})
		}, "want a file name in the model directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := WriteConfig(dir, cfg); err != nil {
				t.Fatal(err)
			}
			tc.setup(t, dir)
			got, err := Load(dir)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Tensors) != len(cfg.Params()) {
				t.Errorf("%d tensors", len(got.Tensors))
			}
		})
	}
}

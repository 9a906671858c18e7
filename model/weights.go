package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/aglrl/agl/model/safetensors"
)

// Weights are a model's configuration and its weight tensors, in
// Config.Params order.
type Weights struct {
	Config  Config
	Tensors []safetensors.Tensor
}

// WeightsFile is the name of the weights file Save writes.
const WeightsFile = "model.safetensors"

// NewRandom initializes weights for c: linear layers and embeddings from a
// normal distribution with standard deviation 0.02, norms at 1, biases at 0.
func NewRandom(c Config, seed uint64) (*Weights, error) {
	c.fillDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	w := &Weights{Config: c}
	for _, p := range c.Params() {
		t := safetensors.Tensor{Shape: slices.Clone(p.Shape), Data: make([]float32, prod(p.Shape))}
		switch {
		case len(p.Shape) == 1 && isNorm(p.Name):
			for i := range t.Data {
				t.Data[i] = 1
			}
		case len(p.Shape) == 1: // bias
		default:
			for i := range t.Data {
				t.Data[i] = float32(rng.NormFloat64() * 0.02)
			}
		}
		w.Tensors = append(w.Tensors, t)
	}
	return w, nil
}

func isNorm(name string) bool { return strings.Contains(name, "norm.") }

// Clone returns a deep copy.
func (w *Weights) Clone() *Weights {
	c := &Weights{Config: w.Config, Tensors: make([]safetensors.Tensor, len(w.Tensors))}
	for i, t := range w.Tensors {
		c.Tensors[i] = safetensors.Tensor{Shape: slices.Clone(t.Shape), Data: slices.Clone(t.Data)}
	}
	return c
}

// IndexFile is the name of a sharded checkpoint's index, whose weight_map
// names the file of every tensor.
const IndexFile = "model.safetensors.index.json"

// Load reads config.json and the weights of a Hugging Face style model
// directory: the files model.safetensors.index.json lists (a sharded
// checkpoint), else model.safetensors. A missing lm_head.weight is taken
// from the embeddings (tied). A tensor the model does not use is an error.
func Load(dir string) (*Weights, error) {
	c, err := ReadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	files, index, err := weightFiles(dir)
	if err != nil {
		return nil, err
	}
	all := map[string]safetensors.Tensor{}
	for _, f := range files {
		st, err := safetensors.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return nil, err
		}
		for k, v := range st.Tensors {
			if index != nil && index[k] != f {
				if index[k] == "" {
					return nil, fmt.Errorf("model: tensor %s in %s is not in %s", k, f, IndexFile)
				}
				return nil, fmt.Errorf("model: tensor %s in %s, but %s puts it in %s", k, f, IndexFile, index[k])
			}
			all[k] = v
		}
	}
	for k, f := range index {
		if _, ok := all[k]; !ok {
			return nil, fmt.Errorf("model: tensor %s missing from %s (listed in %s)", k, f, IndexFile)
		}
	}
	return FromTensors(c, all)
}

// weightFiles lists the safetensors files of dir (names relative to dir)
// and, for a sharded checkpoint, the index's tensor → file map.
func weightFiles(dir string) ([]string, map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, IndexFile))
	if errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(dir, WeightsFile)); err != nil {
			return nil, nil, fmt.Errorf("model: no %s or %s in %s", WeightsFile, IndexFile, dir)
		}
		return []string{WeightsFile}, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("model: %w", err)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, nil, fmt.Errorf("model: %s: %w", IndexFile, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, nil, fmt.Errorf("model: %s has no weight_map", IndexFile)
	}
	var files []string
	for k, f := range idx.WeightMap {
		if f == "" || filepath.Base(f) != f || f == "." || f == ".." {
			return nil, nil, fmt.Errorf("model: %s: tensor %s has file %q, want a file name in the model directory", IndexFile, k, f)
		}
		if !slices.Contains(files, f) {
			files = append(files, f)
		}
	}
	sort.Strings(files)
	return files, idx.WeightMap, nil
}

// FromTensors builds Weights from named tensors, checking shapes. Every
// tensor must be one the config uses, except Hugging Face's RoPE buffers
// (rotary_emb.inv_freq, recomputed from the config) and, with tied
// embeddings, an lm_head.weight equal to the embeddings.
func FromTensors(c Config, named map[string]safetensors.Tensor) (*Weights, error) {
	w := &Weights{Config: c}
	used := make(map[string]bool, len(named))
	for _, p := range c.Params() {
		t, ok := named[p.Name]
		if !ok && p.Name == "lm_head.weight" {
			t, ok = named["model.embed_tokens.weight"]
		}
		if !ok {
			return nil, fmt.Errorf("model: missing tensor %s", p.Name)
		}
		if !slices.Equal(t.Shape, p.Shape) {
			return nil, fmt.Errorf("model: tensor %s has shape %v, config wants %v", p.Name, t.Shape, p.Shape)
		}
		used[p.Name] = true
		w.Tensors = append(w.Tensors, t)
	}
	var unused []string
	for k, t := range named {
		switch {
		case used[k], strings.HasSuffix(k, "rotary_emb.inv_freq"):
		case k == "lm_head.weight" && c.TieWordEmbeddings:
			e := named["model.embed_tokens.weight"]
			if !slices.Equal(t.Shape, e.Shape) || !slices.Equal(t.Data, e.Data) {
				return nil, fmt.Errorf("model: tensor lm_head.weight differs from model.embed_tokens.weight but tie_word_embeddings is true")
			}
		default:
			unused = append(unused, k)
		}
	}
	if len(unused) > 0 {
		sort.Strings(unused)
		if len(unused) > 5 {
			unused = append(unused[:5], fmt.Sprintf("and %d more", len(unused)-5))
		}
		return nil, fmt.Errorf("model: checkpoint tensor(s) %s not used by the %s config (a config field agl does not read?)", strings.Join(unused, ", "), c.ModelType)
	}
	return w, nil
}

// Named returns the tensors by Hugging Face name.
func (w *Weights) Named() map[string]safetensors.Tensor {
	m := make(map[string]safetensors.Tensor, len(w.Tensors))
	for i, p := range w.Config.Params() {
		m[p.Name] = w.Tensors[i]
	}
	return m
}

// Save writes config.json and model.safetensors into dir (created if
// needed).
func (w *Weights) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	if err := WriteConfig(dir, w.Config); err != nil {
		return err
	}
	return safetensors.WriteFile(filepath.Join(dir, WeightsFile),
		&safetensors.File{Tensors: w.Named(), Metadata: map[string]string{"format": "pt"}})
}

// Stats summarizes weights for `agl model info`.
type Stats struct {
	NumParams int
	RMS       float64
	Finite    bool
}

// Stats computes the parameter count and the root-mean-square weight.
func (w *Weights) Stats() Stats {
	s := Stats{Finite: true}
	var sum float64
	for _, t := range w.Tensors {
		s.NumParams += len(t.Data)
		for _, v := range t.Data {
			f := float64(v)
			if math.IsNaN(f) || math.IsInf(f, 0) {
				s.Finite = false
			}
			sum += f * f
		}
	}
	if s.NumParams > 0 {
		s.RMS = math.Sqrt(sum / float64(s.NumParams))
	}
	return s
}

func tensorOf(shape []int, data []float32) safetensors.Tensor {
	return safetensors.Tensor{Shape: slices.Clone(shape), Data: data}
}

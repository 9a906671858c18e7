package model

import (
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

// Load reads config.json and the *.safetensors files of a Hugging Face
// style model directory (sharded checkpoints included). A missing
// lm_head.weight is taken from the embeddings (tied).
func Load(dir string) (*Weights, error) {
	c, err := ReadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("model: no *.safetensors in %s", dir)
	}
	sort.Strings(files)
	all := map[string]safetensors.Tensor{}
	for _, f := range files {
		st, err := safetensors.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for k, v := range st.Tensors {
			all[k] = v
		}
	}
	return FromTensors(c, all)
}

// FromTensors builds Weights from named tensors, checking shapes.
func FromTensors(c Config, named map[string]safetensors.Tensor) (*Weights, error) {
	w := &Weights{Config: c}
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
		w.Tensors = append(w.Tensors, t)
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

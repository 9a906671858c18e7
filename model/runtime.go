package model

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"

	"github.com/gomlx/compute"
	_ "github.com/gomlx/compute/gobackend" // the pure-Go backend
	. "github.com/gomlx/gomlx/core/graph"  //nolint:revive // graph DSL
	"github.com/gomlx/gomlx/core/tensors"
)

// DefaultBackend is the GoMLX backend configuration used for generation
// when none is given: the pure-Go backend with sequential op execution
// (decoding graphs are narrow: running their ops in parallel made batch-1
// decoding 2x slower). "xla:cuda" selects XLA where a PJRT plugin is
// installed.
const DefaultBackend = "go:ops_sequential"

// TrainBackend is the backend configuration for training (SFT and policy
// updates): config when set, else $GOMLX_BACKEND, else the pure-Go backend
// running independent ops in parallel, which pays on the wide
// forward+backward+AdamW graphs (1.55x training tokens/s on 2 cores,
// BenchmarkTrain). Its worker pool is sized far above the core count: with
// the default size (2 x GOMAXPROCS) every slot can end up held by a matrix
// multiplication waiting for a free slot to fan out into, and the step
// hangs (seen on 2 cores). Matrix multiplications still split over
// GOMAXPROCS workers only.
func TrainBackend(config string) string {
	if config != "" {
		return config
	}
	if env := os.Getenv(compute.ConfigEnvVar); env != "" {
		return env
	}
	return fmt.Sprintf("go:parallelism=%d", max(64, 8*runtime.GOMAXPROCS(0)))
}

var (
	backendsMu sync.Mutex
	backends   = map[string]compute.Backend{}
)

// Backend returns the shared backend for a configuration string such as
// "go:ops_sequential". "" means $GOMLX_BACKEND when set, else
// DefaultBackend. Backends are created once per configuration and shared by
// all models of the process.
func Backend(config string) (b compute.Backend, err error) {
	if config == "" {
		config = os.Getenv(compute.ConfigEnvVar)
	}
	if config == "" {
		config = DefaultBackend
	}
	backendsMu.Lock()
	defer backendsMu.Unlock()
	if b, ok := backends[config]; ok {
		return b, nil
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("model: backend %q: %v", config, r)
		}
	}()
	b, err = compute.NewWithConfig(config)
	if err != nil {
		return nil, fmt.Errorf("model: backend %q: %w", config, err)
	}
	backends[config] = b
	return b, nil
}

// Model is a configuration compiled for a backend: it owns the compiled
// graphs (one per input shape bucket) and runs them on weight sets
// (DeviceWeights) that can be swapped freely.
type Model struct {
	cfg     Config
	backend compute.Backend

	logProbsExec *Exec
	genExecs     genExecs
}

// DeviceWeights are weights converted to backend tensors, in Config.Params
// order. They are immutable once made and may be shared by concurrent calls.
type DeviceWeights struct {
	tensors []*tensors.Tensor
}

// New compiles (lazily) the model code for cfg on the given backend
// configuration ("" for DefaultBackend).
func New(cfg Config, backend string) (*Model, error) {
	cfg.fillDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b, err := Backend(backend)
	if err != nil {
		return nil, err
	}
	m := &Model{cfg: cfg, backend: b}
	numParams := len(cfg.Params())
	m.logProbsExec, err = NewExec(b, func(g *Graph, ins []*Node) []*Node {
		n := newNet(cfg, ins[:numParams])
		lp, ent := n.tokenLogProbs(ins[numParams])
		return []*Node{lp, ent}
	})
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	m.logProbsExec.SetMaxCache(1024)
	return m, nil
}

// Config returns the model's configuration.
func (m *Model) Config() Config { return m.cfg }

// Upload converts host weights to backend tensors.
func (m *Model) Upload(w *Weights) (*DeviceWeights, error) {
	specs := m.cfg.Params()
	if len(w.Tensors) != len(specs) {
		return nil, fmt.Errorf("model: weights have %d tensors, config wants %d", len(w.Tensors), len(specs))
	}
	d := &DeviceWeights{}
	for i, t := range w.Tensors {
		if prod(t.Shape) != prod(specs[i].Shape) || len(t.Data) != prod(t.Shape) {
			return nil, fmt.Errorf("model: tensor %s has shape %v, want %v", specs[i].Name, t.Shape, specs[i].Shape)
		}
		d.tensors = append(d.tensors, toDevice(specs[i], t.Data))
	}
	return d, nil
}

// Download copies device weights back to host weights.
func (m *Model) Download(d *DeviceWeights) (*Weights, error) {
	w := &Weights{Config: m.cfg}
	for i, spec := range m.cfg.Params() {
		data, err := tensors.CopyFlatData[float32](d.tensors[i])
		if err != nil {
			return nil, fmt.Errorf("model: download %s: %w", spec.Name, err)
		}
		w.Tensors = append(w.Tensors, tensorOf(spec.Shape, fromDevice(spec, data)))
	}
	return w, nil
}

// bucket rounds n up to a size class so few graphs are compiled: multiples
// of 8 up to 64, then powers of two, then multiples of 512.
func bucket(n int) int {
	switch {
	case n <= 1:
		return 1
	case n <= 64:
		return (n + 7) / 8 * 8
	case n <= 512:
		p := 64
		for p < n {
			p *= 2
		}
		return p
	}
	return (n + 511) / 512 * 512
}

// padIDs right-pads sequences with 0 into a [rows, cols] matrix.
func padIDs(seqs [][]int32, rows, cols int) []int32 {
	flat := make([]int32, rows*cols)
	for i, s := range seqs {
		copy(flat[i*cols:], s)
	}
	return flat
}

// LogProbs computes teacher-forced per-token log-probs and entropies for
// each sequence: out[i][t] = log p(seqs[i][t] | seqs[i][:t]) under the
// temperature-1 distribution, with out[i][0] = 0; entropy[i][t] is the
// entropy of the distribution that predicted token t.
func (m *Model) LogProbs(ctx context.Context, w *DeviceWeights, seqs [][]int32) (logp, entropy [][]float32, err error) {
	if len(seqs) == 0 {
		return nil, nil, nil
	}
	maxLen := 0
	for _, s := range seqs {
		maxLen = max(maxLen, len(s))
		for _, id := range s {
			if id < 0 || int(id) >= m.cfg.VocabSize {
				return nil, nil, fmt.Errorf("model: token id %d outside vocabulary of %d", id, m.cfg.VocabSize)
			}
		}
	}
	if maxLen < 1 {
		return nil, nil, fmt.Errorf("model: empty sequences")
	}
	if err := m.checkLength(maxLen); err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	rows, cols := bucket(len(seqs)), bucket(max(maxLen, 2))
	ids := tensors.FromFlatDataAndDimensions(padIDs(seqs, rows, cols), rows, cols)
	args := append(w.args(), ids)
	outs, err := m.logProbsExec.Call(args...)
	if err != nil {
		return nil, nil, fmt.Errorf("model: log-probs: %w", err)
	}
	lp, err1 := tensors.CopyFlatData[float32](outs[0])
	ent, err2 := tensors.CopyFlatData[float32](outs[1])
	if err1 != nil || err2 != nil {
		return nil, nil, fmt.Errorf("model: log-probs: %v %v", err1, err2)
	}
	for i, s := range seqs {
		logp = append(logp, append([]float32(nil), lp[i*cols:i*cols+len(s)]...))
		entropy = append(entropy, append([]float32(nil), ent[i*cols:i*cols+len(s)]...))
	}
	return logp, entropy, nil
}

// checkLength refuses sequences longer than the config's MaxExactLength.
func (m *Model) checkLength(n int) error {
	if exact := m.cfg.MaxExactLength(); exact > 0 && n > exact {
		return fmt.Errorf("model: sequence of %d tokens exceeds %d, the longest agl computes exactly for this config (sliding_window or dynamic rope_scaling)", n, exact)
	}
	return nil
}

func (d *DeviceWeights) args() []any {
	a := make([]any, 0, len(d.tensors)+8)
	for _, t := range d.tensors {
		a = append(a, t)
	}
	return a
}

// Device layout: linear layers' weights ([out, in] in Hugging Face files)
// are kept transposed, [in, out], on the backend: the Go backend's matmul
// packs a non-transposed right-hand side with SIMD but a transposed one
// with a slow generic loop. Embeddings stay [vocab, hidden].

// transposed reports whether a parameter is stored transposed on device.
func transposed(spec ParamSpec) bool {
	return len(spec.Shape) == 2 && (strings.HasSuffix(spec.Name, "_proj.weight") || spec.Name == "lm_head.weight")
}

// deviceShape is the shape of a parameter on the backend.
func deviceShape(spec ParamSpec) []int {
	if transposed(spec) {
		return []int{spec.Shape[1], spec.Shape[0]}
	}
	return spec.Shape
}

// toDevice makes a backend tensor of host data in Hugging Face layout.
func toDevice(spec ParamSpec, data []float32) *tensors.Tensor {
	if transposed(spec) {
		data = transpose2(data, spec.Shape[0], spec.Shape[1])
	} else {
		data = append([]float32(nil), data...)
	}
	return tensors.FromFlatDataAndDimensions(data, deviceShape(spec)...)
}

// fromDevice turns device-layout data back into Hugging Face layout.
func fromDevice(spec ParamSpec, data []float32) []float32 {
	if transposed(spec) {
		return transpose2(data, spec.Shape[1], spec.Shape[0])
	}
	return data
}

// transpose2 transposes a rows×cols row-major matrix.
func transpose2(data []float32, rows, cols int) []float32 {
	out := make([]float32, len(data))
	for r := range rows {
		for c := range cols {
			out[c*rows+r] = data[r*cols+c]
		}
	}
	return out
}

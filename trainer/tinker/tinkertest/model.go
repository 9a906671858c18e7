package tinkertest

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
)

// learner is a model the stand-in trains: a Bigram, or the embedded
// transformer (Transformer).
type learner interface {
	vocab() int
	// logprobs returns log p(targets[i][t] | tokens[i][:t+1]) per datum.
	logprobs(ctx context.Context, tokens, targets [][]int32) ([][]float64, error)
	// backward adds Σ_i Σ_t dlogp[i][t]·∂logp_it/∂θ to the gradient.
	backward(ctx context.Context, tokens, targets [][]int32, dlogp [][]float64) error
	// step applies Adam with the accumulated gradient, clears it and
	// returns its norm.
	step(ctx context.Context, a Adam) (float64, error)
	// save snapshots the weights and optimizer state (name: unique).
	save(name string) (snapshot, error)
	// load restores a snapshot, with its optimizer state or fresh.
	load(s snapshot, optimizer bool) error
}

// snapshot is saved weights: a sampler, and a state load restores.
type snapshot interface {
	sample(ctx context.Context, prompt []int32, maxTokens int, temp, topP float64, topK int, stop []int32, seed uint64) ([]int32, []float32, bool, error)
	close()
}

// Bigram is the stand-in's tiny model: logits(next | prev) = W[prev][·],
// a V×V table trained in full (the stand-in's "LoRA"). Its forward,
// backward and sampling are exact, so the gradient of a loss is known to
// float precision.
type Bigram struct {
	V    int
	W    []float64 // V×V, row prev
	Grad []float64
	// Adam state.
	M, S []float64
	T    int
}

// NewBigram returns a V-token model with small seeded random weights.
func NewBigram(v int, seed uint64) *Bigram {
	r := rand.New(rand.NewPCG(seed, 0x7417))
	m := &Bigram{V: v, W: make([]float64, v*v), Grad: make([]float64, v*v), M: make([]float64, v*v), S: make([]float64, v*v)}
	for i := range m.W {
		m.W[i] = 0.1 * r.NormFloat64()
	}
	return m
}

// Clone is a deep copy.
func (m *Bigram) Clone() *Bigram {
	return &Bigram{V: m.V, W: slices.Clone(m.W), Grad: slices.Clone(m.Grad), M: slices.Clone(m.M), S: slices.Clone(m.S), T: m.T}
}

// dist is the softmax of row prev at temperature 1.
func (m *Bigram) dist(prev int32) []float64 {
	row := m.W[int(prev)*m.V : int(prev+1)*m.V]
	mx := slices.Max(row)
	p := make([]float64, m.V)
	var z float64
	for i, x := range row {
		p[i] = math.Exp(x - mx)
		z += p[i]
	}
	for i := range p {
		p[i] /= z
	}
	return p
}

// Logprobs returns log p(targets[t] | tokens[t]) for each t.
func (m *Bigram) Logprobs(tokens, targets []int32) []float64 {
	out := make([]float64, len(tokens))
	for t := range tokens {
		out[t] = math.Log(m.dist(tokens[t])[targets[t]])
	}
	return out
}

// Backward adds Σ_t dlogp[t]·∂logp_t/∂W to Grad.
func (m *Bigram) Backward(tokens, targets []int32, dlogp []float64) {
	for t := range tokens {
		if dlogp[t] == 0 {
			continue
		}
		p := m.dist(tokens[t])
		row := int(tokens[t]) * m.V
		for j := range p {
			d := -p[j]
			if int32(j) == targets[t] {
				d++
			}
			m.Grad[row+j] += dlogp[t] * d
		}
	}
}

func (m *Bigram) vocab() int { return m.V }

func (m *Bigram) logprobs(_ context.Context, tokens, targets [][]int32) ([][]float64, error) {
	out := make([][]float64, len(tokens))
	for i := range tokens {
		out[i] = m.Logprobs(tokens[i], targets[i])
	}
	return out, nil
}

func (m *Bigram) backward(_ context.Context, tokens, targets [][]int32, dlogp [][]float64) error {
	for i := range tokens {
		m.Backward(tokens[i], targets[i], dlogp[i])
	}
	return nil
}

func (m *Bigram) step(_ context.Context, a Adam) (float64, error) { return m.Step(a), nil }

func (m *Bigram) save(string) (snapshot, error) { return m.Clone(), nil }

func (m *Bigram) load(s snapshot, optimizer bool) error {
	w, ok := s.(*Bigram)
	if !ok || w.V != m.V {
		return errors.New("weights of another model")
	}
	*m = *w.Clone()
	if !optimizer {
		m.M, m.S, m.T = make([]float64, len(w.M)), make([]float64, len(w.S)), 0
	}
	return nil
}

func (m *Bigram) sample(_ context.Context, prompt []int32, maxTokens int, temp, topP float64, topK int, stop []int32, seed uint64) ([]int32, []float32, bool, error) {
	toks, lps, stopped := m.Sample(prompt, maxTokens, temp, topP, topK, stop, rand.New(rand.NewPCG(seed, uint64(len(prompt)))))
	return toks, lps, stopped, nil
}

func (m *Bigram) close() {}

// Adam is the optimizer step's parameters (the SDK's AdamParams).
type Adam struct {
	LearningRate float64 `json:"learning_rate"`
	Beta1        float64 `json:"beta1"`
	Beta2        float64 `json:"beta2"`
	Eps          float64 `json:"eps"`
	WeightDecay  float64 `json:"weight_decay"`
	GradClipNorm float64 `json:"grad_clip_norm"`
}

// Step applies Adam (decoupled weight decay, global-norm clipping) with
// the accumulated gradient, clears it and returns its norm.
func (m *Bigram) Step(a Adam) float64 {
	var n2 float64
	for _, g := range m.Grad {
		n2 += g * g
	}
	norm := math.Sqrt(n2)
	scale := 1.0
	if a.GradClipNorm > 0 && norm > a.GradClipNorm {
		scale = a.GradClipNorm / norm
	}
	m.T++
	b1, b2 := 1-math.Pow(a.Beta1, float64(m.T)), 1-math.Pow(a.Beta2, float64(m.T))
	for i, g := range m.Grad {
		g *= scale
		m.M[i] = a.Beta1*m.M[i] + (1-a.Beta1)*g
		m.S[i] = a.Beta2*m.S[i] + (1-a.Beta2)*g*g
		m.W[i] -= a.LearningRate * (m.M[i]/b1/(math.Sqrt(m.S[i]/b2)+a.Eps) + a.WeightDecay*m.W[i])
		m.Grad[i] = 0
	}
	return norm
}

// Sample draws up to maxTokens tokens after prompt at temperature temp
// (0: greedy), nucleus topP and topK (≤ 0: off), stopping after a stop
// id. It returns the tokens, their temperature-1 log-probs and whether a
// stop id ended it.
func (m *Bigram) Sample(prompt []int32, maxTokens int, temp, topP float64, topK int, stop []int32, r *rand.Rand) ([]int32, []float32, bool) {
	prev := prompt[len(prompt)-1]
	var toks []int32
	var lps []float32
	for len(toks) < maxTokens {
		p := m.dist(prev)
		var next int32
		if temp == 0 {
			next = int32(slices.Index(p, slices.Max(p)))
		} else {
			next = m.draw(p, temp, topP, topK, r)
		}
		toks, lps = append(toks, next), append(lps, float32(math.Log(p[next])))
		if slices.Contains(stop, next) {
			return toks, lps, true
		}
		prev = next
	}
	return toks, lps, false
}

func (m *Bigram) draw(p []float64, temp, topP float64, topK int, r *rand.Rand) int32 {
	idx := make([]int, len(p))
	q := make([]float64, len(p))
	var z float64
	for i := range p {
		idx[i] = i
		q[i] = math.Pow(p[i], 1/temp)
		z += q[i]
	}
	for i := range q {
		q[i] /= z
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case q[a] > q[b]:
			return -1
		case q[a] < q[b]:
			return 1
		}
		return 0
	})
	keep := len(idx)
	if topK > 0 && topK < keep {
		keep = topK
	}
	if topP > 0 && topP < 1 {
		var c float64
		for k := 0; k < keep; k++ {
			c += q[idx[k]]
			if c >= topP {
				keep = k + 1
				break
			}
		}
	}
	var tot float64
	for _, i := range idx[:keep] {
		tot += q[i]
	}
	u := r.Float64() * tot
	for _, i := range idx[:keep] {
		u -= q[i]
		if u <= 0 {
			return int32(i)
		}
	}
	return int32(idx[keep-1])
}

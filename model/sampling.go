package model

import (
	"math"
	"math/rand/v2"
	"slices"

	"github.com/aglrl/agl/engine"
)

// logSoftmaxAt returns log softmax(logits)[id] in float64 (temperature 1).
func logSoftmaxAt(logits []float32, id int32) float32 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	z := 0.0
	for _, v := range logits {
		z += math.Exp(float64(v) - mx)
	}
	return float32(float64(logits[id]) - mx - math.Log(z))
}

// sampler draws tokens for one request. Each draw consumes exactly one
// random number, so results do not depend on batching.
type sampler struct {
	s   engine.Sampling
	rng *rand.Rand
	// scratch
	idx  []int32
	prob []float64
}

func newSampler(s engine.Sampling, seed uint64) *sampler {
	return &sampler{s: s, rng: rand.New(rand.NewPCG(seed, seed^0xda3e39cb94b95bdb))}
}

// sample picks the next token from logits.
func (sp *sampler) sample(logits []float32) int32 {
	u := sp.rng.Float64()
	s := sp.s
	if s.Temperature <= 0 || s.TopK == 1 {
		best := int32(0)
		for i, v := range logits {
			if v > logits[best] {
				best = int32(i)
			}
		}
		return best
	}
	invT := 1 / float64(s.Temperature)
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	n := len(logits)
	sp.prob = slices.Grow(sp.prob[:0], n)[:n]
	z := 0.0
	for i, v := range logits {
		p := math.Exp((float64(v) - mx) * invT)
		sp.prob[i] = p
		z += p
	}
	topP := float64(s.TopP)
	if s.TopK <= 0 && (topP <= 0 || topP >= 1) {
		// Plain sampling in id order.
		target := u * z
		acc := 0.0
		for i, p := range sp.prob {
			acc += p
			if acc > target {
				return int32(i)
			}
		}
		return int32(n - 1)
	}
	// Sort ids by probability (ties by id) and truncate.
	sp.idx = slices.Grow(sp.idx[:0], n)[:n]
	for i := range sp.idx {
		sp.idx[i] = int32(i)
	}
	slices.SortFunc(sp.idx, func(a, b int32) int {
		if sp.prob[a] != sp.prob[b] {
			if sp.prob[a] > sp.prob[b] {
				return -1
			}
			return 1
		}
		return int(a - b)
	})
	keep := n
	if s.TopK > 0 && s.TopK < keep {
		keep = s.TopK
	}
	kept := 0.0
	for i := range keep {
		kept += sp.prob[sp.idx[i]]
	}
	if topP > 0 && topP < 1 {
		acc := 0.0
		for i := range keep {
			acc += sp.prob[sp.idx[i]]
			if acc >= topP*kept {
				keep = i + 1
				break
			}
		}
		kept = acc
	}
	target := u * kept
	acc := 0.0
	for i := range keep {
		acc += sp.prob[sp.idx[i]]
		if acc > target {
			return sp.idx[i]
		}
	}
	return sp.idx[keep-1]
}

package model

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph DSL
	"github.com/gomlx/gomlx/core/tensors"
)

// Tests run on DefaultBackend unless AGL_TEST_BACKEND names another GoMLX
// backend configuration (e.g. "go" for the parallel executor).

// tinyConfig is a ≈100k-parameter model used across tests.
func tinyConfig(modelType string) Config {
	c := Config{ModelType: modelType, VocabSize: 64, HiddenSize: 32, IntermediateSize: 64, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 8, RMSNormEps: 1e-6, RopeTheta: 10000,
		MaxPositionEmbeddings: 256, TieWordEmbeddings: modelType != TypeLlama}
	c.fillDefaults()
	return c
}

func newTiny(t testing.TB, modelType string, seed uint64) (*Model, *Weights, *DeviceWeights) {
	t.Helper()
	cfg := tinyConfig(modelType)
	w, err := NewRandom(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	// Larger weights make the distributions peaked enough to notice errors.
	for i := range w.Tensors {
		if len(w.Tensors[i].Shape) == 2 {
			for j := range w.Tensors[i].Data {
				w.Tensors[i].Data[j] *= 10
			}
		}
		if len(w.Tensors[i].Shape) == 1 && !isNorm(cfg.Params()[i].Name) {
			for j := range w.Tensors[i].Data {
				w.Tensors[i].Data[j] = 0.1 * float32(j%5)
			}
		}
	}
	m, err := New(cfg, os.Getenv("AGL_TEST_BACKEND"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := m.Upload(w)
	if err != nil {
		t.Fatal(err)
	}
	return m, w, d
}

func TestLogProbsMatchReference(t *testing.T) {
	for _, mt := range []string{TypeQwen3, TypeQwen2, TypeLlama} {
		t.Run(mt, func(t *testing.T) {
			m, w, d := newTiny(t, mt, 1)
			seqs := [][]int32{{1, 2, 3, 4, 5, 6, 7}, {9, 8}, {60, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 1}}
			lp, ent, err := m.LogProbs(context.Background(), d, seqs)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range seqs {
				refLP, refEnt := referenceLogProbs(w, s)
				if len(lp[i]) != len(s) {
					t.Fatalf("row %d: %d log-probs for %d tokens", i, len(lp[i]), len(s))
				}
				for j := range s {
					if d := math.Abs(float64(lp[i][j] - refLP[j])); d > 1e-4 {
						t.Errorf("row %d token %d: logp %v, reference %v", i, j, lp[i][j], refLP[j])
					}
					if d := math.Abs(float64(ent[i][j] - refEnt[j])); d > 1e-4 {
						t.Errorf("row %d token %d: entropy %v, reference %v", i, j, ent[i][j], refEnt[j])
					}
				}
			}
		})
	}
}

func TestTargetLogProbsValuesAndGradient(t *testing.T) {
	const n, v = 6, 50
	rng := rand.New(rand.NewPCG(4, 2))
	logits := make([]float32, n*v)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 4)
	}
	targets := []int32{0, 7, 49, 3, 3, 20}
	w := []float32{1, 0.5, -2, 0, 1, 3}
	u := []float32{0.3, -1, 0, 2, 1, 0.1}
	exec := MustNewExec(mustBackend(t), func(x, tg, wn, un *Node) []*Node {
		lp, ent := targetLogProbs(x, tg)
		loss := Add(ReduceAllSum(Mul(lp, wn)), ReduceAllSum(Mul(ent, un)))
		return []*Node{lp, ent, Gradient(loss, x)[0]}
	})
	outs := exec.MustCall(tensors.FromFlatDataAndDimensions(logits, n, v), targets, w, u)
	lp := tensors.MustCopyFlatData[float32](outs[0])
	ent := tensors.MustCopyFlatData[float32](outs[1])
	grad := tensors.MustCopyFlatData[float32](outs[2])
	for i := range n {
		row := make([]float64, v)
		for j := range v {
			row[j] = float64(logits[i*v+j])
		}
		ls := logSoftmax64(row)
		h := 0.0
		for _, l := range ls {
			h -= math.Exp(l) * l
		}
		if d := math.Abs(float64(lp[i]) - ls[targets[i]]); d > 1e-5 {
			t.Errorf("row %d: logp %v, want %v", i, lp[i], ls[targets[i]])
		}
		if d := math.Abs(float64(ent[i]) - h); d > 1e-5 {
			t.Errorf("row %d: entropy %v, want %v", i, ent[i], h)
		}
		for j := range v {
			p := math.Exp(ls[j])
			want := -float64(w[i]) * p
			if int32(j) == targets[i] {
				want += float64(w[i])
			}
			want += float64(u[i]) * (-p * (ls[j] + h))
			if d := math.Abs(float64(grad[i*v+j]) - want); d > 1e-5 {
				t.Errorf("row %d logit %d: grad %v, want %v", i, j, grad[i*v+j], want)
			}
		}
	}
}

// TestHandWrittenGradients checks softmax, silu and matmul, whose
// gradients are written out (see withGradient and productWithGradient), against GoMLX's
// differentiation of the plain formulas, values and gradients, including
// masked (−1e30) scores.
func TestHandWrittenGradients(t *testing.T) {
	const rows, cols = 5, 9
	rng := rand.New(rand.NewPCG(7, 1))
	x := make([]float32, rows*cols)
	u := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 4)
		u[i] = float32(rng.NormFloat64())
	}
	x[3], x[cols+8], x[4*cols] = -1e30, -1e30, -1e30 // masked scores
	for _, c := range []struct {
		name      string
		got, want func(x *Node) *Node
	}{
		{"softmax", softmax, func(x *Node) *Node {
			e := Exp(Sub(x, ReduceAndKeep(x, ReduceMax, -1)))
			return Div(e, ReduceAndKeep(e, ReduceSum, -1))
		}},
		{"silu", silu, func(x *Node) *Node { return Mul(x, Logistic(x)) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := func(f func(x *Node) *Node) (y, grad []float32) {
				exec := MustNewExec(mustBackend(t), func(x, u *Node) []*Node {
					y := f(x)
					return []*Node{y, Gradient(ReduceAllSum(Mul(y, u)), x)[0]}
				})
				outs := exec.MustCall(tensors.FromFlatDataAndDimensions(x, rows, cols), tensors.FromFlatDataAndDimensions(u, rows, cols))
				return tensors.MustCopyFlatData[float32](outs[0]), tensors.MustCopyFlatData[float32](outs[1])
			}
			y, g := run(c.got)
			wy, wg := run(c.want)
			for i := range y {
				if d := math.Abs(float64(y[i] - wy[i])); d > 1e-5*(1+math.Abs(float64(wy[i]))) {
					t.Errorf("value %d: %v, want %v", i, y[i], wy[i])
				}
				if d := math.Abs(float64(g[i] - wg[i])); d > 1e-5*(1+math.Abs(float64(wg[i]))) {
					t.Errorf("gradient %d: %v, want %v", i, g[i], wg[i])
				}
			}
		})
	}
	// matmulWithGradient: x [2, 3, K] against W [K, M] and W [M, K] (wT);
	// batchMatmulWithGradient: x [2, 3, K] against W [2, K, M] and
	// [2, M, K]. dW is computed from xᵀ·v ("KM") and from vᵀ·x ("MK") in
	// each orientation (see productWithGradient's transpose costs at N = 6
	// and N = 3).
	for _, batched := range []bool{false, true} {
		for _, c := range []struct {
			name string
			k, m int
			wT   bool
		}{{"W/KM", 4, 7, false}, {"W/MK", 9, 2, false}, {"WT/KM", 2, 9, true}, {"WT/MK", 7, 4, true}} {
			name := "matmul/" + c.name
			if batched {
				name = "batch" + name
			}
			t.Run(name, func(t *testing.T) {
				wDims, cAxis := []int{c.k, c.m}, 0
				if c.wT {
					wDims, cAxis = []int{c.m, c.k}, 1
				}
				var batch []int
				if batched {
					wDims, cAxis, batch = append([]int{2}, wDims...), cAxis+1, []int{0}
				}
				xs, ws, us := make([]float32, 6*c.k), make([]float32, prod(wDims)), make([]float32, 6*c.m)
				for _, a := range [][]float32{xs, ws, us} {
					for i := range a {
						a[i] = float32(rng.NormFloat64())
					}
				}
				run := func(f func(x, w *Node) *Node) [][]float32 {
					exec := MustNewExec(mustBackend(t), func(x, w, u *Node) []*Node {
						y := f(x, w)
						loss := ReduceAllSum(Mul(Mul(y, y), u)) // v = 2·y·u depends on y
						return append([]*Node{y}, Gradient(loss, x, w)...)
					})
					outs := exec.MustCall(tensors.FromFlatDataAndDimensions(xs, 2, 3, c.k),
						tensors.FromFlatDataAndDimensions(ws, wDims...), tensors.FromFlatDataAndDimensions(us, 2, 3, c.m))
					var r [][]float32
					for _, o := range outs {
						r = append(r, tensors.MustCopyFlatData[float32](o))
					}
					return r
				}
				got := run(func(x, w *Node) *Node {
					if batched {
						return batchMatmulWithGradient(x, w, c.wT)
					}
					return matmulWithGradient(x, w, c.wT)
				})
				want := run(func(x, w *Node) *Node { return DotGeneral(x, []int{2}, batch, w, []int{cAxis}, batch) })
				for j, name := range []string{"value", "dx", "dW"} {
					if len(got[j]) != len(want[j]) {
						t.Fatalf("%s: %d values, want %d", name, len(got[j]), len(want[j]))
					}
					for i := range want[j] {
						if d := math.Abs(float64(got[j][i] - want[j][i])); d > 1e-5*(1+math.Abs(float64(want[j][i]))) {
							t.Errorf("%s %d: %v, want %v", name, i, got[j][i], want[j][i])
						}
					}
				}
			})
		}
	}
}

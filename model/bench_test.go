package model

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/aglrl/agl/engine"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph DSL
	"github.com/gomlx/gomlx/core/tensors"
)

// Benchmarks on the presets with agl's byte+chat vocabulary (265 ids).
//
//	go test ./model -run '^$' -bench . -benchtime 3x

const benchVocab = 265

func benchModel(b *testing.B, preset, backend string) (*Model, *Weights) {
	cfg, err := Preset(preset, benchVocab)
	if err != nil {
		b.Fatal(err)
	}
	w, err := NewRandom(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	m, err := New(cfg, backend)
	if err != nil {
		b.Fatal(err)
	}
	return m, w
}

// BenchmarkGenerate measures generated tokens per second with `batch`
// concurrent requests (prompt 64 tokens, 64 new tokens each).
func BenchmarkGenerate(b *testing.B) {
	for _, preset := range []string{"1m", "10m"} {
		for _, batch := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/batch%d", preset, batch), func(b *testing.B) {
				m, w := benchModel(b, preset, "")
				e, err := NewEngine(m, w, 1, EngineOptions{MaxBatch: batch, MaxContext: 256, InitialCache: 128})
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				prompt := make([]int32, 64)
				for i := range prompt {
					prompt[i] = int32(i % 200)
				}
				run := func() int {
					var wg sync.WaitGroup
					var mu sync.Mutex
					n := 0
					for i := range batch {
						wg.Add(1)
						go func() {
							defer wg.Done()
							r, err := e.Generate(context.Background(), prompt, engine.Sampling{Temperature: 1, MaxTokens: 64, Seed: uint64(i + 1)})
							if err != nil {
								b.Error(err)
							}
							mu.Lock()
							n += len(r.IDs)
							mu.Unlock()
						}()
					}
					wg.Wait()
					return n
				}
				run() // compile
				b.ResetTimer()
				tokens := 0
				for range b.N {
					tokens += run()
				}
				b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tok/s")
			})
		}
	}
}

// BenchmarkTrain measures training tokens per second (forward, backward and
// AdamW) on batches of 8 sequences of 128 tokens, on the training backend
// (TrainBackend; $GOMLX_BACKEND overrides it, e.g. go:ops_sequential).
func BenchmarkTrain(b *testing.B) {
	for _, preset := range []string{"1m", "10m"} {
		b.Run(preset, func(b *testing.B) {
			m, w := benchModel(b, preset, TrainBackend(""))
			tr, err := NewTrainer(m, w, DefaultAdamW())
			if err != nil {
				b.Fatal(err)
			}
			batch := &Batch{}
			for i := range 8 {
				ids := make([]int32, 128)
				wt := make([]float32, 128)
				for j := range ids {
					ids[j] = int32((i*31 + j*7) % benchVocab)
					wt[j] = 1.0 / 1024
				}
				batch.IDs = append(batch.IDs, ids)
				batch.Weights = append(batch.Weights, wt)
			}
			ctx := context.Background()
			if _, err := tr.StepSFT(ctx, batch); err != nil { // compile
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				if _, err := tr.StepSFT(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(8*128*b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}

// targetLogProbsF32 is targetLogProbs as it was before the float64
// normaliser (the baseline of BenchmarkTargetLogProbs).
func targetLogProbsF32(logits, targets *Node) (logp, entropy *Node) {
	g := logits.Graph()
	nRows := logits.Shape().Dim(0)
	p := Softmax(logits, -1)
	idx := Concatenate([]*Node{Iota(g, shapes.Make(dtypes.Int32, nRows, 1), 0), Reshape(ConvertDType(targets, dtypes.Int32), nRows, 1)}, 1)
	pt := Gather(p, idx)
	zt := Gather(logits, idx)
	logp = Log(Max(pt, BroadcastToDims(Const(g, float32(1e-37)), nRows)))
	logZ := Sub(zt, logp)
	entropy = Sub(logZ, ReduceSum(Mul(p, logits), -1))
	return logp, entropy
}

// BenchmarkTargetLogProbs measures the log-prob/entropy head with its
// gradient at a 152k vocabulary (64 rows), with the float64 normaliser
// (current) and the float32 one it replaced, in one run.
func BenchmarkTargetLogProbs(b *testing.B) {
	const n, v = 64, 152064
	rng := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, n*v)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 3)
	}
	targets := make([]int32, n)
	for i := range targets {
		targets[i] = int32(rng.IntN(v))
	}
	for _, impl := range []struct {
		name string
		f    func(x, t *Node) (*Node, *Node)
	}{{"float32-normaliser", targetLogProbsF32}, {"float64-normaliser", targetLogProbs}} {
		b.Run(impl.name, func(b *testing.B) {
			bk, err := Backend(TrainBackend(""))
			if err != nil {
				b.Fatal(err)
			}
			exec := MustNewExec(bk, func(x, tg *Node) []*Node {
				lp, ent := impl.f(x, tg)
				loss := Add(ReduceAllSum(lp), ReduceAllSum(ent))
				return []*Node{lp, ent, Gradient(loss, x)[0]}
			})
			in := tensors.FromFlatDataAndDimensions(logits, n, v)
			exec.MustCall(in, targets)
			b.ResetTimer()
			for range b.N {
				for _, o := range exec.MustCall(in, targets) {
					o.FinalizeAll()
				}
			}
		})
	}
}

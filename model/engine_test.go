package model

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aglrl/agl/engine"
)

func newTestEngine(t testing.TB, mt string, maxBatch int) (*Engine, *Model, *Weights) {
	t.Helper()
	m, w, _ := newTiny(t, mt, 2)
	e, err := NewEngine(m, w, 1, EngineOptions{Name: "tiny", MaxBatch: maxBatch, MaxContext: 200, InitialCache: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, m, w
}

func testPrompts() [][]int32 {
	var ps [][]int32
	for i := range 8 {
		p := []int32{1}
		for j := range 3 + 5*i {
			p = append(p, int32((7*i+3*j)%60+2))
		}
		ps = append(ps, p)
	}
	return ps
}

func TestGenerationLogProbsMatchTeacherForced(t *testing.T) {
	for _, mt := range []string{TypeQwen3, TypeQwen2} {
		t.Run(mt, func(t *testing.T) {
			e, m, w := newTestEngine(t, mt, 4)
			d, err := m.Upload(w)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for i, p := range testPrompts()[:4] {
				res, err := e.Generate(ctx, p, engine.Sampling{Temperature: 0.8, TopP: 0.9, MaxTokens: 40, Seed: uint64(i + 1)})
				if err != nil {
					t.Fatal(err)
				}
				if len(res.IDs) != 40 || res.FinishReason != engine.FinishLength || res.ModelVersion != 1 || res.Model != "tiny" {
					t.Fatalf("result %d ids, finish %q, version %d, model %q", len(res.IDs), res.FinishReason, res.ModelVersion, res.Model)
				}
				lp, _, err := m.LogProbs(ctx, d, [][]int32{append(slices.Clone(p), res.IDs...)})
				if err != nil {
					t.Fatal(err)
				}
				maxDiff := 0.0
				for j, g := range res.Logprobs {
					maxDiff = math.Max(maxDiff, math.Abs(float64(g-lp[0][len(p)+j])))
				}
				if maxDiff > 2e-4 {
					t.Errorf("prompt %d: generation vs teacher-forced log-probs differ by %g", i, maxDiff)
				}
			}
		})
	}
}

// generateAll runs the prompts concurrently with seeds 100+i.
func generateAll(t *testing.T, e *Engine, prompts [][]int32, s engine.Sampling) []engine.Result {
	t.Helper()
	out := make([]engine.Result, len(prompts))
	var wg sync.WaitGroup
	errs := make(chan error, len(prompts))
	for i, p := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := s
			s.Seed = uint64(100 + i)
			r, err := e.Generate(context.Background(), p, s)
			if err != nil {
				errs <- err
			}
			out[i] = r
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return out
}

func TestBatchedMatchesSequential(t *testing.T) {
	prompts := testPrompts()
	s := engine.Sampling{Temperature: 1, TopK: 20, MaxTokens: 24}
	batched, _, _ := newTestEngine(t, TypeQwen3, 8)
	one, _, _ := newTestEngine(t, TypeQwen3, 1)
	// Pick a stop id that some sequences produce.
	probe := generateAll(t, one, prompts, s)
	s.StopIDs = []int32{probe[0].IDs[10], probe[3].IDs[6]}
	rb := generateAll(t, batched, prompts, s)
	rs := generateAll(t, one, prompts, s)
	stops := 0
	for i := range prompts {
		if !slices.Equal(rb[i].IDs, rs[i].IDs) {
			t.Errorf("prompt %d: batched %v, sequential %v", i, rb[i].IDs, rs[i].IDs)
		}
		for j := range rb[i].Logprobs {
			if d := math.Abs(float64(rb[i].Logprobs[j] - rs[i].Logprobs[j])); d > 1e-4 {
				t.Errorf("prompt %d token %d: log-prob differs by %g", i, j, d)
			}
		}
		if rb[i].FinishReason == engine.FinishStop {
			stops++
			if !slices.Contains(s.StopIDs, rb[i].IDs[len(rb[i].IDs)-1]) {
				t.Errorf("prompt %d: finished by stop without the stop id last: %v", i, rb[i].IDs)
			}
		}
	}
	// Same seed again gives the same ids; a different seed differs.
	again := generateAll(t, batched, prompts[:2], s)
	if !slices.Equal(again[0].IDs, rb[0].IDs) {
		t.Errorf("same seed, different ids: %v vs %v", again[0].IDs, rb[0].IDs)
	}
	if stops < 2 {
		t.Errorf("only %d of %d sequences stopped on a stop id", stops, len(prompts))
	}
	if st := batched.Stats(); st.Tokens == 0 || st.Steps == 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestSwapKeepsInFlightOnOldVersion(t *testing.T) {
	e, _, w := newTestEngine(t, TypeQwen3, 4)
	ctx := context.Background()
	long := make(chan engine.Result, 1)
	go func() {
		r, err := e.Generate(ctx, []int32{1, 2, 3}, engine.Sampling{Temperature: 1, MaxTokens: 150, Seed: 9})
		if err != nil {
			t.Error(err)
		}
		long <- r
	}()
	// Wait until the long request is being decoded, then swap.
	deadline := time.Now().Add(10 * time.Second)
	for e.Stats().Running == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the long request never started")
		}
		time.Sleep(time.Millisecond)
	}
	w2 := w.Clone()
	for i := range w2.Tensors[0].Data {
		w2.Tensors[0].Data[i] *= -1
	}
	if err := e.Swap(w2, 2); err != nil {
		t.Fatal(err)
	}
	if e.Version() != 2 {
		t.Fatalf("version %d after swap", e.Version())
	}
	r2, err := e.Generate(ctx, []int32{1, 2, 3}, engine.Sampling{Temperature: 1, MaxTokens: 5, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	r1 := <-long
	if r1.ModelVersion != 1 || len(r1.IDs) != 150 {
		t.Errorf("in-flight request: version %d, %d ids; want version 1, 150 ids", r1.ModelVersion, len(r1.IDs))
	}
	if r2.ModelVersion != 2 {
		t.Errorf("new request: version %d, want 2", r2.ModelVersion)
	}
}

func TestGenerateCancel(t *testing.T) {
	e, _, _ := newTestEngine(t, TypeQwen3, 2)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Generate(ctx, []int32{1, 2}, engine.Sampling{MaxTokens: 100}); err == nil {
		t.Error("cancelled context: no error")
	}
	// The engine still works afterwards.
	r, err := e.Generate(context.Background(), []int32{1, 2}, engine.Sampling{MaxTokens: 3})
	if err != nil || len(r.IDs) != 3 {
		t.Fatalf("after cancel: %v %v", r, err)
	}
	for _, bad := range [][]int32{{}, {64}, {-1}, make([]int32, 200)} {
		if _, err := e.Generate(context.Background(), bad, engine.Sampling{MaxTokens: 3}); !errors.Is(err, engine.ErrInvalidPrompt) {
			t.Errorf("prompt of %d ids %v: %v, want engine.ErrInvalidPrompt", len(bad), bad[:min(len(bad), 2)], err)
		}
	}
}

// TestStressNoHang runs many short generations and training steps under a
// deadline: the GoMLX parallel executor was seen to hang at random, and this
// would catch a hang of whichever executor is configured.
func TestStressNoHang(t *testing.T) {
	e, m, w := newTestEngine(t, TypeQwen3, 4)
	done := make(chan error, 1)
	go func() {
		var wg sync.WaitGroup
		errs := make(chan error, 400)
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 100 {
					p := []int32{1, int32(2 + (g*100+i)%50)}
					if _, err := e.Generate(context.Background(), p, engine.Sampling{Temperature: 1, MaxTokens: 1 + i%3, Seed: uint64(i + 1)}); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		tr, err := NewTrainer(m, w, DefaultAdamW())
		if err != nil {
			done <- err
			return
		}
		for i := range 100 {
			b := &Batch{IDs: [][]int32{{1, 2, int32(3 + i%20)}}, Weights: [][]float32{{0, 1, 1}}}
			if _, err := tr.StepSFT(context.Background(), b); err != nil {
				done <- err
				return
			}
		}
		wg.Wait()
		close(errs)
		done <- <-errs
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(90 * time.Second):
		panic(fmt.Sprintf("stress test hung (backend %q): 400 generations + 100 train steps did not finish in 90s", DefaultBackend))
	}
}

func TestOpenEngine(t *testing.T) {
	w, err := NewRandom(tinyConfig(TypeLlama), 9)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := w.Save(dir); err != nil {
		t.Fatal(err)
	}
	e, err := OpenEngine(dir, "", 7, EngineOptions{Name: "m"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r, err := e.Generate(context.Background(), []int32{1, 2, 3}, engine.Sampling{MaxTokens: 4})
	if err != nil || len(r.IDs) != 4 || r.ModelVersion != 7 || e.MaxContext() != 256 || e.Model().Config().ModelType != TypeLlama {
		t.Fatalf("result %+v, err %v, max context %d", r, err, e.MaxContext())
	}
	if _, err := OpenEngine(t.TempDir(), "", 1, EngineOptions{}); err == nil {
		t.Error("empty directory: no error")
	}
	e.Close()
	if _, err := e.Generate(context.Background(), []int32{1}, engine.Sampling{MaxTokens: 1}); err != ErrClosed {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}

package model

import (
	"context"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aglrl/agl/engine"
	"github.com/aglrl/agl/internal/testutil"
)

// TestChunkedPrefillMatchesTeacherForced prefills prompts longer than one
// chunk (prefillChunk) next to a short one in the same batch: the
// generated tokens' log-probs match a teacher-forced pass.
func TestChunkedPrefillMatchesTeacherForced(t *testing.T) {
	if testing.Short() {
		t.Skip("prefills prompts of 1k tokens in chunks (tens of seconds)")
	}
	testutil.SkipRace(t, "1.7k prompt tokens prefilled and checked against a teacher-forced pass: numerics (the engine's concurrent admission is raced by TestBatchedMatchesSequential and TestStressNoHang)")
	m, w, d := newTiny(t, TypeQwen3, 3)
	e, err := NewEngine(m, w, 1, EngineOptions{MaxBatch: 3, MaxContext: 1300})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var prompts [][]int32
	for i, n := range []int{1100, 9, 600} {
		p := make([]int32, n)
		for j := range p {
			p[j] = int32((j*7+i*13)%60 + 2)
		}
		prompts = append(prompts, p)
	}
	res := make([]engine.Result, len(prompts))
	errs := make([]error, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Go(func() {
			res[i], errs[i] = e.Generate(context.Background(), p, engine.Sampling{Temperature: 1, MaxTokens: 5, Seed: uint64(i + 1)})
		})
	}
	wg.Wait()
	for i, p := range prompts {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		lp, _, err := m.LogProbs(context.Background(), d, [][]int32{append(slices.Clone(p), res[i].IDs...)})
		if err != nil {
			t.Fatal(err)
		}
		worst := 0.0
		for j, g := range res[i].Logprobs {
			worst = math.Max(worst, math.Abs(float64(g-lp[0][len(p)+j])))
		}
		if len(res[i].IDs) != 5 || worst > 2e-4 {
			t.Errorf("prompt of %d tokens: %d ids, log-probs off by %g from teacher-forced", len(p), len(res[i].IDs), worst)
		}
	}
}

// TestLongContextEngine runs a 20k-token prompt through an engine with
// max_context 32768 on a tiny model, and checks an over-limit prompt's
// error names both numbers.
func TestLongContextEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 20k-token prompt (a minute)")
	}
	testutil.SkipRace(t, "a 20k-token prompt through one request: numerics")
	cfg := Config{ModelType: TypeQwen3, VocabSize: 64, HiddenSize: 8, IntermediateSize: 8, NumHiddenLayers: 1,
		NumAttentionHeads: 1, NumKeyValueHeads: 1, HeadDim: 8, RMSNormEps: 1e-6, RopeTheta: 1e6,
		MaxPositionEmbeddings: 40960, TieWordEmbeddings: true}
	w, err := NewRandom(cfg, 4)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(cfg, os.Getenv("AGL_TEST_BACKEND"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(m, w, 1, EngineOptions{MaxBatch: 1, MaxContext: 32768})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.MaxContext() != 32768 || e.Context().Source != "engine.max_context" {
		t.Fatalf("context %+v", e.Context())
	}
	prompt := make([]int32, 20000)
	for i := range prompt {
		prompt[i] = int32(i*31%61 + 1)
	}
	res, err := e.Generate(context.Background(), prompt, engine.Sampling{Temperature: 1, MaxTokens: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.IDs) != 2 || len(res.Logprobs) != 2 || res.FinishReason != engine.FinishLength {
		t.Fatalf("result %+v", res)
	}
	for _, lp := range res.Logprobs {
		if lp > 0 || math.IsNaN(float64(lp)) || math.IsInf(float64(lp), 0) {
			t.Fatalf("log-prob %v", lp)
		}
	}
	over := make([]int32, 33000)
	_, err = e.Generate(context.Background(), over, engine.Sampling{MaxTokens: 1})
	if err == nil || !strings.Contains(err.Error(), "33000") || !strings.Contains(err.Error(), "32768") {
		t.Fatalf("over-limit prompt: %v, want an error naming 33000 and 32768", err)
	}
}

func TestChooseContext(t *testing.T) {
	base := Config{ModelType: TypeQwen3, VocabSize: 64, HiddenSize: 32, IntermediateSize: 64, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 8, MaxPositionEmbeddings: 40960}
	base.fillDefaults()
	perPos := base.KVCacheBytes(4, 1) // 2*4*2 layers*4 slots*2 kv*8 = 1 KiB per position
	window := base
	window.UseSlidingWindow, window.SlidingWindow, window.MaxWindowLayers = true, new(int), 1
	*window.SlidingWindow = 4096
	dynamic := base
	dynamic.RopeScaling = &RopeScaling{RopeType: "dynamic", Factor: 2}
	dynamic.MaxPositionEmbeddings = 8192
	tests := []struct {
		name    string
		cfg     Config
		opts    EngineOptions
		want    int
		source  string
		wantErr string
	}{
		{"default", base, EngineOptions{MaxBatch: 4, KVCacheBudget: 1 << 40}, 40960, "max_position_embeddings", ""},
		{"explicit", base, EngineOptions{MaxBatch: 4, MaxContext: 32768, KVCacheBudget: 1 << 40}, 32768, "engine.max_context", ""},
		{"default over budget", base, EngineOptions{MaxBatch: 4, KVCacheBudget: 10000 * perPos}, 9728, "memory", ""},
		{"explicit over budget", base, EngineOptions{MaxBatch: 4, MaxContext: 32768, KVCacheBudget: 10000 * perPos}, 0, "", "max_context 32768 needs a 32.0 MiB KV cache"},
		{"sliding window default", window, EngineOptions{MaxBatch: 4, KVCacheBudget: 1 << 40}, 4096, "max_position_embeddings", ""},
		{"sliding window explicit", window, EngineOptions{MaxBatch: 4, MaxContext: 8192, KVCacheBudget: 1 << 40}, 0, "", "max_context 8192 exceeds 4096"},
		{"dynamic rope", dynamic, EngineOptions{MaxBatch: 4, MaxContext: 16384, KVCacheBudget: 1 << 40}, 0, "", "max_context 16384 exceeds 8192"},
		{"tiny budget", base, EngineOptions{MaxBatch: 4, KVCacheBudget: 100 * perPos}, 0, "", "lower max_batch"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			info, err := chooseContext(tc.cfg, tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if info.MaxContext != tc.want || info.Source != tc.source || info.KVCacheBytes != tc.cfg.KVCacheBytes(4, tc.want) {
				t.Errorf("got %+v, want %d from %s", info, tc.want, tc.source)
			}
			if (tc.source == "memory") != strings.Contains(info.Note, "budget") {
				t.Errorf("note %q", info.Note)
			}
		})
	}
}

// TestLogProbsRefuseInexactLengths: with a sliding window agl does not
// implement, sequences the window would slide over are refused by the
// trainer's paths rather than computed differently from Hugging Face.
func TestLogProbsRefuseInexactLengths(t *testing.T) {
	cfg := tinyConfig(TypeMistral)
	win := 16
	cfg.SlidingWindow = &win
	w, err := NewRandom(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(cfg, os.Getenv("AGL_TEST_BACKEND"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := m.Upload(w)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.LogProbs(context.Background(), d, [][]int32{make([]int32, 16)}); err != nil {
		t.Fatalf("16 tokens in a window of 16: %v", err)
	}
	_, _, err = m.LogProbs(context.Background(), d, [][]int32{make([]int32, 17)})
	if err == nil || !strings.Contains(err.Error(), "sequence of 17 tokens exceeds 16") {
		t.Fatalf("17 tokens: %v", err)
	}
	tr, err := NewTrainer(m, w, DefaultAdamW())
	if err != nil {
		t.Fatal(err)
	}
	_, err = tr.StepSFT(context.Background(), &Batch{IDs: [][]int32{make([]int32, 17)}, Weights: [][]float32{make([]float32, 17)}})
	if err == nil || !strings.Contains(err.Error(), "exceeds 16") {
		t.Fatalf("training on 17 tokens: %v", err)
	}
}

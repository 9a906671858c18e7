package model

import (
	"context"
	"math"
	"os"
	"testing"

	"github.com/aglrl/agl/engine"
	"github.com/aglrl/agl/internal/testutil"
)

// TestLogProbsLargeVocabAccuracy checks the trainer's log-probs at a
// Qwen-sized vocabulary (152,064 ids, tiny hidden size) against a float64
// host reference and against the engine's log-probs for the tokens it
// sampled: both within 1e-5 (a float32 softmax normaliser is off by ~1e-4
// here, a built-in policy-ratio mismatch).
func TestLogProbsLargeVocabAccuracy(t *testing.T) {
	testutil.SkipRace(t, "float64 reference log-probs over a 152k vocabulary: numerics")
	cfg := Config{ModelType: TypeQwen3, VocabSize: 152064, HiddenSize: 16, IntermediateSize: 32, NumHiddenLayers: 1,
		NumAttentionHeads: 2, NumKeyValueHeads: 1, HeadDim: 8, RMSNormEps: 1e-6, RopeTheta: 1e6,
		MaxPositionEmbeddings: 64, TieWordEmbeddings: true}
	w, err := NewRandom(cfg, 11)
	if err != nil {
		t.Fatal(err)
	}
	for i := range w.Tensors { // logits with a spread of several nats
		if len(w.Tensors[i].Shape) == 2 {
			for j := range w.Tensors[i].Data {
				w.Tensors[i].Data[j] *= 40
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
	ctx := context.Background()
	eng, err := NewEngine(m, w, 1, EngineOptions{MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	prompt := []int32{5, 151000, 77, 9001, 42}
	res, err := eng.Generate(ctx, prompt, engine.Sampling{Temperature: 1, MaxTokens: 4, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	seq := append(append([]int32(nil), prompt...), res.IDs...)
	lp, _, err := m.LogProbs(ctx, d, [][]int32{seq})
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := referenceLogProbs(w, seq)
	worstRef, worstEng := 0.0, 0.0
	for i := 1; i < len(seq); i++ {
		worstRef = math.Max(worstRef, math.Abs(float64(lp[0][i]-ref[i])))
	}
	for i, e := range res.Logprobs {
		worstEng = math.Max(worstEng, math.Abs(float64(lp[0][len(prompt)+i]-e)))
	}
	t.Logf("log-probs %v; max |LogProbs - float64 reference| %.2g, max |LogProbs - engine| %.2g", ref[1:], worstRef, worstEng)
	if worstRef > 1e-5 || worstEng > 1e-5 {
		t.Errorf("LogProbs off by %.2g from the float64 reference and %.2g from the engine, want <= 1e-5", worstRef, worstEng)
	}
}

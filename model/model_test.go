package model

import (
	"context"
	"math"
	"os"
	"testing"
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

package samples

import (
	"math"
	"strings"
	"testing"
)

// TestDistill: the advantage of a trained token is −coef·(log μ − log
// π_teacher): positive where the teacher likes the sampled token more than
// the student did, negative where less; masked tokens get nothing; replace
// clears the RL advantage, add keeps it under the distillation term; the
// mean reverse KL is over trained tokens only.
func TestDistill(t *testing.T) {
	sample := func() Sample {
		return Sample{RolloutID: "r", IDs: []int32{1, 2, 3, 4, 5}, LossMask: []uint8{0, 0, 1, 1, 1},
			Logprobs: []float32{0, 0, -1, -0.5, -2}, Advantage: 0.75}
	}
	teacher := []float32{-9, -9, -0.25, -0.5, -3}
	cases := []struct {
		name string
		coef float64
		mode DistillMode
		want []float32 // TokenAdvantages
		kl   float64
	}{
		// Token 2: μ −1, teacher −0.25 → kl −0.75 → A +0.75; token 3: equal → 0;
		// token 4: μ −2, teacher −3 → kl +1 → A −1.
		{"replace", 1, DistillReplace, []float32{0, 0, 0.75, 0, -1}, (-0.75 + 0 + 1) / 3.0},
		{"replace coef 2", 2, DistillReplace, []float32{0, 0, 1.5, 0, -2}, (-0.75 + 0 + 1) / 3.0},
		{"add", 1, DistillAdd, []float32{0, 0, 1.5, 0.75, -0.25}, (-0.75 + 0 + 1) / 3.0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ss := []Sample{sample()}
			st, err := Distill(ss, [][]float32{teacher}, c.coef, c.mode)
			if err != nil {
				t.Fatal(err)
			}
			if st.Tokens != 3 || math.Abs(st.ReverseKL-c.kl) > 1e-9 {
				t.Errorf("stats %+v, want 3 tokens, reverse KL %v", st, c.kl)
			}
			got := ss[0].TokenAdvantages()
			for i := range got {
				if math.Abs(float64(got[i]-c.want[i])) > 1e-6 {
					t.Fatalf("token advantages %v, want %v", got, c.want)
				}
			}
		})
	}
}

// TestDistillPerCallCredit: with per-call RL advantages (credit per_call),
// add keeps each call's advantage and adds the token's distillation term;
// replace drops them.
func TestDistillPerCallCredit(t *testing.T) {
	mk := func() []Sample {
		return []Sample{{RolloutID: "r", IDs: []int32{1, 2, 3, 4, 5}, LossMask: []uint8{0, 1, 0, 1, 1},
			Logprobs: []float32{0, -1, 0, -1, -1}, Advantage: 1, CallSpans: [][2]int{{1, 2}, {3, 5}}, CallAdvantages: []float64{1, -2}}}
	}
	teacher := [][]float32{{0, -0.5, 0, -1, -1.5}}
	ss := mk()
	if _, err := Distill(ss, teacher, 1, DistillAdd); err != nil {
		t.Fatal(err)
	}
	want := []float32{0, 1.5, 0, -2, -2.5}
	if got := ss[0].TokenAdvantages(); !equalF32(got, want) {
		t.Errorf("add: %v, want %v", got, want)
	}
	ss = mk()
	if _, err := Distill(ss, teacher, 1, DistillReplace); err != nil {
		t.Fatal(err)
	}
	want = []float32{0, 0.5, 0, 0, -0.5}
	if got := ss[0].TokenAdvantages(); !equalF32(got, want) {
		t.Errorf("replace: %v, want %v", got, want)
	}
}

func equalF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > 1e-6 {
			return false
		}
	}
	return true
}

// TestDistillRefuses: a bad coef or mode, a teacher row of the wrong
// length and a teacher log-prob that is not one are errors that name what
// was wrong, and leave the samples untouched.
func TestDistillRefuses(t *testing.T) {
	nan := float32(math.NaN())
	cases := []struct {
		name    string
		teacher [][]float32
		coef    float64
		mode    DistillMode
		want    string
	}{
		{"coef 0", [][]float32{{0, -1, -1}}, 0, DistillAdd, "coef 0"},
		{"coef negative", [][]float32{{0, -1, -1}}, -1, DistillAdd, "coef -1"},
		{"unknown mode", [][]float32{{0, -1, -1}}, 1, "both", `mode "both"`},
		{"rows", nil, 1, DistillAdd, "0 teacher rows for 1 samples"},
		{"short row", [][]float32{{0, -1}}, 1, DistillAdd, "has 3 tokens, the teacher scored 2"},
		{"NaN", [][]float32{{0, -1, nan}}, 1, DistillAdd, "token 2 (id 9): teacher log-prob NaN"},
		{"-Inf", [][]float32{{0, float32(math.Inf(-1)), -1}}, 1, DistillAdd, "token 1 (id 8): teacher log-prob -Inf"},
		{"positive", [][]float32{{0, 0.5, -1}}, 1, DistillAdd, "teacher log-prob 0.5 is not a log-probability"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ss := []Sample{{RolloutID: "r", IDs: []int32{7, 8, 9}, LossMask: []uint8{0, 1, 1}, Logprobs: []float32{0, -1, -1}, Advantage: 1}}
			_, err := Distill(ss, c.teacher, c.coef, c.mode)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one containing %q", err, c.want)
			}
			if ss[0].DistillAdvantages != nil || ss[0].Advantage != 1 {
				t.Errorf("a refused call changed the sample: %+v", ss[0])
			}
		})
	}
}

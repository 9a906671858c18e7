package trainer

import (
	"context"
	"math"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/aglrl/agl/samples"
)

// TestDistillApply: samples of several lengths scored in micro-batches
// (packed longest first, so out of order) each get their own teacher
// row: the scorer's log-prob of a token is a function of its id alone
// here, so a row given to the wrong sample shows.
func TestDistillApply(t *testing.T) {
	var calls int
	score := func(_ context.Context, seqs [][]int32) ([][]float32, error) {
		calls++
		out := make([][]float32, len(seqs))
		for i, s := range seqs {
			out[i] = make([]float32, len(s))
			for k, id := range s {
				out[i][k] = -float32(id) / 8
			}
		}
		return out, nil
	}
	mk := func(ids ...int32) samples.Sample {
		s := samples.Sample{RolloutID: "r", IDs: ids, LossMask: make([]uint8, len(ids)), Logprobs: make([]float32, len(ids))}
		for i := 1; i < len(ids); i++ {
			s.LossMask[i], s.Logprobs[i] = 1, -1
		}
		return s
	}
	ss := []samples.Sample{mk(1, 2), mk(3, 4, 5, 6, 7), mk(8, 9, 10), mk(11, 12, 13, 14)}
	for i := range ss {
		ss[i].Index = i
	}
	d := NewDistill(&DistillConfig{Teacher: Teachers{AllStudents: "big"}, Coef: 2}, "student", score, 6)
	if d == nil || d.Mode != samples.DistillReplace {
		t.Fatalf("distill %+v: want one, mode replace by default", d)
	}
	st, err := d.apply(context.Background(), ss)
	if err != nil {
		t.Fatal(err)
	}
	if calls < 3 {
		t.Errorf("%d scorer calls with a budget of 6 tokens, want one per micro-batch (≥ 3)", calls)
	}
	var sum float64
	n := 0
	for _, s := range ss {
		for i, m := range s.LossMask {
			if m == 0 {
				continue
			}
			want := -2 * (-1 - (-float64(s.IDs[i]) / 8))
			if math.Abs(s.DistillAdvantages[i]-want) > 1e-6 {
				t.Fatalf("sample %d token %d: advantage %v, want %v", s.Index, i, s.DistillAdvantages[i], want)
			}
			sum += -1 + float64(s.IDs[i])/8
			n++
		}
	}
	if st.Tokens != n || math.Abs(st.ReverseKL-sum/float64(n)) > 1e-6 {
		t.Errorf("stats %+v, want %d tokens, reverse KL %v", st, n, sum/float64(n))
	}
}

// TestTeachersYAML: `teacher: NAME` teaches every trained policy; a map
// teaches the students it names only.
func TestTeachersYAML(t *testing.T) {
	var one, per DistillConfig
	if err := yaml.Unmarshal([]byte("teacher: big\ncoef: 1\n"), &one); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte("teacher: {writer: big-w, checker: big-c}\ncoef: 1\n"), &per); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ts            Teachers
		student, want string
	}{{one.Teacher, "writer", "big"}, {one.Teacher, "any", "big"}, {per.Teacher, "writer", "big-w"}, {per.Teacher, "checker", "big-c"}, {per.Teacher, "other", ""}} {
		if got := c.ts.Of(c.student); got != c.want {
			t.Errorf("%v: teacher of %s %q, want %q", c.ts, c.student, got, c.want)
		}
	}
	if s := per.Teacher.Students(); len(s) != 2 || s[0] != "checker" || one.Teacher.Students() != nil {
		t.Errorf("students %v and %v", s, one.Teacher.Students())
	}
	var bad DistillConfig
	if err := yaml.Unmarshal([]byte("teacher: [a, b]\n"), &bad); err == nil {
		t.Errorf("a list of teachers decoded")
	}
}

// TestRecordDistilledAdvantages: a distilled call's recorded advantage
// (the dashboard's per-call view) is its RL advantage plus the mean of its
// trained tokens' distillation advantages.
func TestRecordDistilledAdvantages(t *testing.T) {
	ss := []samples.Sample{{RolloutID: "r", IDs: []int32{1, 2, 3, 4, 5, 6}, LossMask: []uint8{0, 1, 1, 0, 1, 0},
		CallIDs: []string{"a", "b"}, CallSpans: [][2]int{{1, 3}, {4, 5}}, Advantage: 0.5,
		DistillAdvantages: []float64{0, -1, 2, 0, 3, 0}}}
	var m StepMetrics
	recordAdvantages(&m, ss)
	if got := m.Advantages["r"]; got["a"] != 0.5+0.5 || got["b"] != 0.5+3 {
		t.Errorf("recorded %v, want a 1, b 3.5", got)
	}
}

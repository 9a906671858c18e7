package trainer

import (
	"context"
	"fmt"
	"math"
	"sort"

	"go.yaml.in/yaml/v3"

	"github.com/aglrl/agl/samples"
)

// DistillConfig is `trainer.distill`: on-policy distillation. The teacher,
// a policy of the `policies:` section that is not trained (frozen
// embedded, or an upstream serving prompt log-probs), scores every token
// a trained policy sampled; the per-token reverse KL to it becomes the
// tokens' advantage (mode replace) or is added to the RL advantage (mode
// add). See samples.Distill.
type DistillConfig struct {
	// Teacher names the teacher policy of every trained policy, or maps
	// each trained policy (student) to its own teacher; a trained policy
	// missing from the map is not distilled.
	Teacher Teachers `yaml:"teacher"`
	// Coef scales the reverse KL (> 0, required).
	Coef float64 `yaml:"coef"`
	// Mode is replace (default) or add.
	Mode string `yaml:"mode"`
}

// Teachers maps a trained policy's name to its teacher's; AllStudents
// holds the teacher of every trained policy (`teacher: NAME`).
type Teachers map[string]string

// AllStudents is the key of Teachers that a single teacher name fills.
const AllStudents = "*"

// UnmarshalYAML reads a policy name (every trained policy's teacher) or a
// map from student to teacher.
func (t *Teachers) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		var name string
		if err := n.Decode(&name); err != nil {
			return err
		}
		*t = Teachers{AllStudents: name}
		return nil
	}
	m := map[string]string{}
	if err := n.Decode(&m); err != nil {
		return fmt.Errorf("trainer.distill.teacher: want a policy name or a map from trained policy to teacher: %w", err)
	}
	*t = m
	return nil
}

// Of is the teacher of trained policy student ("" for none).
func (t Teachers) Of(student string) string {
	if name, ok := t[student]; ok {
		return name
	}
	return t[AllStudents]
}

// Students lists the keys of a map (sorted), none for a single teacher.
func (t Teachers) Students() []string {
	var out []string
	for s := range t {
		if s != AllStudents {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

func (d *DistillConfig) validate() error {
	switch {
	case len(d.Teacher) == 0:
		return fmt.Errorf("trainer.distill.teacher: no teacher policy named")
	case !(d.Coef > 0) || math.IsInf(d.Coef, 0):
		return fmt.Errorf("trainer.distill.coef %v: want a finite value > 0", d.Coef)
	case d.Mode != string(samples.DistillReplace) && d.Mode != string(samples.DistillAdd):
		return fmt.Errorf("trainer.distill.mode %q: want %s or %s", d.Mode, samples.DistillReplace, samples.DistillAdd)
	}
	for s, t := range d.Teacher {
		if t == "" {
			return fmt.Errorf("trainer.distill.teacher: the teacher of %s is empty", s)
		}
	}
	return nil
}

// withDefaults is d with the default mode (a copy: the config it came
// from is not changed).
func (d *DistillConfig) withDefaults() *DistillConfig {
	c := *d
	if c.Mode == "" {
		c.Mode = string(samples.DistillReplace)
	}
	return &c
}

// Scorer returns a teacher's log-probs of each sequence:
// lp[i][t] = log π_teacher(seqs[i][t] | seqs[i][:t]) at temperature 1,
// lp[i][0] unused.
type Scorer func(ctx context.Context, seqs [][]int32) ([][]float32, error)

// Distill is a trained policy's teacher as the loop uses it.
type Distill struct {
	// Teacher is the teacher policy's name; Score its log-probs.
	Teacher string
	Score   Scorer
	Coef    float64
	Mode    samples.DistillMode
	// MicroBatchTokens bounds the samples scored in one call (their
	// padded size; 0: all at once).
	MicroBatchTokens int
}

// NewDistill is trained policy student's distillation per c (validated),
// scored by score; nil when c gives student no teacher.
func NewDistill(c *DistillConfig, student string, score Scorer, microBatchTokens int) *Distill {
	if c == nil {
		return nil
	}
	c = c.withDefaults()
	teacher := c.Teacher.Of(student)
	if teacher == "" {
		return nil
	}
	return &Distill{Teacher: teacher, Score: score, Coef: c.Coef, Mode: samples.DistillMode(c.Mode), MicroBatchTokens: microBatchTokens}
}

// apply scores ss with the teacher, in batches of at most MicroBatchTokens
// padded tokens, and sets their distillation advantages.
func (d *Distill) apply(ctx context.Context, ss []samples.Sample) (samples.DistillStats, error) {
	budget := d.MicroBatchTokens
	if budget <= 0 {
		budget = math.MaxInt
	}
	teacher := make([][]float32, len(ss))
	index := make(map[*samples.Sample]int, len(ss))
	for i := range ss {
		index[&ss[i]] = i
	}
	batches, _ := samples.Pack(ss, budget, 0)
	for _, b := range batches {
		seqs := make([][]int32, len(b.Samples))
		for k, s := range b.Samples {
			seqs[k] = s.IDs
		}
		lp, err := d.Score(ctx, seqs)
		if err != nil {
			return samples.DistillStats{}, err
		}
		if len(lp) != len(seqs) {
			return samples.DistillStats{}, fmt.Errorf("the teacher scored %d of %d sequences", len(lp), len(seqs))
		}
		for k, s := range b.Samples {
			teacher[index[s]] = lp[k]
		}
	}
	return samples.Distill(ss, teacher, d.Coef, d.Mode)
}

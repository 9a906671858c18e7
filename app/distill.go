package app

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/aglrl/agl/engine/upstream"
	"github.com/aglrl/agl/model"
	"github.com/aglrl/agl/tokenizer"
	"github.com/aglrl/agl/trainer"
	"github.com/aglrl/agl/trainer/embedded"
)

// checkDistill validates trainer.distill (dc) against the policies (set;
// nil without a policies: section) before anything runs: every teacher is
// a policy of kind frozen or upstream, not its own student, whose
// tokenizer has the student's vocabulary; every student a map names is a
// trained policy.
func checkDistill(dc *trainer.DistillConfig, set *PolicySet) error {
	if dc == nil {
		return nil
	}
	if set == nil {
		return fmt.Errorf("trainer.distill: the teacher is a policy of the policies: section, and the config has none (declare the student as a policy of kind %s and the teacher as one of kind %s or %s)",
			PolicyTrained, PolicyFrozen, PolicyUpstream)
	}
	trained := set.Trained()
	for _, s := range dc.Teacher.Students() {
		if !slices.Contains(trained, s) {
			return fmt.Errorf("trainer.distill.teacher: %s is not a trained policy (trained: %s)", s, strings.Join(trained, ", "))
		}
	}
	for _, s := range trained {
		t := dc.Teacher.Of(s)
		if t == "" {
			continue
		}
		if t == s {
			return fmt.Errorf("trainer.distill.teacher: policy %s is its own teacher", s)
		}
		tc, ok := set.byName[t]
		if !ok {
			return fmt.Errorf("trainer.distill.teacher: %q is not a policy (policies: %s)", t, strings.Join(set.names, ", "))
		}
		if tc.Kind != PolicyFrozen && tc.Kind != PolicyUpstream {
			return fmt.Errorf("trainer.distill.teacher: policy %s is of kind %s: a teacher is of kind %s or %s", t, tc.Kind, PolicyFrozen, PolicyUpstream)
		}
		sdir, sfp, err := vocabulary(s, set.byName[s])
		if err != nil {
			return fmt.Errorf("trainer.distill: student %w", err)
		}
		tdir, tfp, err := vocabulary(t, tc)
		if err != nil {
			return fmt.Errorf("trainer.distill: teacher %w", err)
		}
		if sfp != tfp {
			return fmt.Errorf("trainer.distill: the tokenizer of teacher %s (%s) differs from the tokenizer of student %s (%s): a teacher scores the student's token ids, so both need one vocabulary",
				t, tdir, s, sdir)
		}
	}
	return nil
}

// vocabulary is where policy name's tokenizer.json lies and its
// vocabulary's fingerprint.
func vocabulary(name string, pc PolicyConfig) (dir, fingerprint string, err error) {
	dir = pc.ModelDir
	if pc.Kind == PolicyUpstream {
		if len(pc.Upstream.Models) == 0 || pc.Upstream.Models[0].TokenizerDir == "" {
			return "", "", fmt.Errorf("%s: an upstream teacher needs upstream.models[0].tokenizer_dir (its tokenizer.json, compared with the student's)", name)
		}
		dir = pc.Upstream.Models[0].TokenizerDir
	}
	tok, err := tokenizer.LoadDir(dir)
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", name, err)
	}
	return dir, tokenizer.Fingerprint(tok), nil
}

// distill gives each trained policy of sv that trainer.distill names a
// student its teacher (checked by checkDistill): a frozen policy scores on
// a model of its own (its weights uploaded once, the trainer's backend),
// an upstream one through its first model's prompt log-probs.
func (o trainOpts) distill(set *PolicySet, sv *served) error {
	dc := o.tc.Distill
	if dc == nil {
		return nil
	}
	scorers := map[string]trainer.Scorer{}
	for i := range sv.pols {
		p := &sv.pols[i]
		t := dc.Teacher.Of(p.Name)
		if t == "" {
			continue
		}
		sc, ok := scorers[t]
		if !ok {
			var err error
			if sc, err = o.scorer(t, set.byName[t]); err != nil {
				return fmt.Errorf("trainer.distill: teacher %s: %w", t, err)
			}
			scorers[t] = sc
		}
		p.Distill = trainer.NewDistill(dc, p.Name, sc, o.tc.WithDefaults().MicroBatchTokens)
	}
	return nil
}

// upstreamScoreCalls bounds the concurrent prompt log-probs calls of one
// scoring (the upstream batches them).
const upstreamScoreCalls = 8

func (o trainOpts) scorer(name string, pc PolicyConfig) (trainer.Scorer, error) {
	switch pc.Kind {
	case PolicyFrozen:
		w, err := model.Load(pc.ModelDir)
		if err != nil {
			return nil, err
		}
		m, err := model.New(w.Config, model.TrainBackend(o.ec.Backend))
		if err != nil {
			return nil, err
		}
		ref, err := embedded.NewReference(m, w)
		if err != nil {
			return nil, err
		}
		return trainer.Scorer(ref), nil
	case PolicyUpstream:
		cl, err := upstream.New(*pc.Upstream)
		if err != nil {
			return nil, fmt.Errorf("upstream: %w", err)
		}
		modelName := pc.Upstream.Models[0].Name
		return func(ctx context.Context, seqs [][]int32) ([][]float32, error) {
			out := make([][]float32, len(seqs))
			g, gctx := errgroup.WithContext(ctx)
			g.SetLimit(upstreamScoreCalls)
			for i, s := range seqs {
				g.Go(func() (err error) {
					out[i], err = cl.PromptLogprobs(gctx, modelName, s)
					return err
				})
			}
			if err := g.Wait(); err != nil {
				return nil, err
			}
			return out, nil
		}, nil
	}
	return nil, fmt.Errorf("policy of kind %s cannot teach", pc.Kind)
}

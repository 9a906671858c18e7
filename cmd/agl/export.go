package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/aglrl/agl/app"
	"github.com/aglrl/agl/samples"
)

// runExport writes the training samples of terminal rollouts as JSONL or
// Parquet for use by other trainers:
//
//	agl export --format parquet --out step.parquet --after CURSOR --estimator grpo --agg rollout-mean
//
// It reads the store named by --store / --data-dir / --config (like the
// server commands; SQLite read-only, so beside a running gateway), builds samples with the same code the embedded trainer
// uses, and reports a summary (with the cursor to continue from) as one JSON
// line on stdout — or on stderr when the samples themselves go to stdout.
// Advantages are computed within the groups present in the export, so export
// all rollouts of a step together (a group cut by --after/--limit is
// normalized over the part exported).
func runExport(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	load := configFlags(fs)
	format := fs.String("format", "jsonl", "output format: jsonl or parquet")
	out := fs.String("out", "-", "output file, - for stdout")
	after := fs.Int64("after", 0, "terminal cursor to start after (a terminal_seq; 0: from the start)")
	limit := fs.Int("limit", 0, "at most this many rollouts (0: all)")
	estimator := fs.String("estimator", string(samples.GRPO), "advantage estimator: grpo, dr_grpo, rloo, reinforce_pp_baseline")
	eps := fs.Float64("eps", 1e-6, "epsilon in the grpo / reinforce++ denominators")
	dropZero := fs.Bool("drop-zero-variance", false, "drop groups whose rewards are all equal")
	agg := fs.String("agg", string(samples.DefaultAggregation), "loss aggregation weights: rollout-mean, token-mean, seq-mean-token-mean, seq-mean-token-sum")
	credit := fs.String("credit", string(samples.CreditBroadcast), "credit assignment: broadcast, per_call, discounted, last_call")
	gamma := fs.Float64("gamma", 0, "discount of --credit discounted (0: 1)")
	var agents stringList
	fs.Var(&agents, "train-agent", "export only this agent's calls (repeatable; \"\" the default agent; none: all)")
	noMerge := fs.Bool("no-merge", false, "one sample per model call")
	acrossVersions := fs.Bool("merge-across-versions", false, "merge calls served by different model versions")
	maxPrompt := fs.Int("max-prompt-len", 0, "exclude calls with longer prompts (0: no limit)")
	maxResp := fs.Int("max-response-len", 0, "response token limit per call (0: no limit)")
	maxSeq := fs.Int("max-seq-len", 0, "sample length limit (0: no limit)")
	rule := fs.String("length-rule", string(samples.LengthTruncate), "over-long responses: truncate or drop")
	fill := fs.Float64("reward-fill", 0, "reward of rollouts that reported none")
	dropMissing := fs.Bool("drop-missing-reward", false, "drop rollouts that reported no reward")
	primary := fs.String("reward-primary", "", "dimension of multi-dimensional rewards to train on")
	callRewards := fs.Bool("add-call-rewards", false, "add per-call intermediate rewards to the final reward")
	includeVal := fs.Bool("include-val", false, "also export validation rollouts")
	policy := fs.String("policy", "", "with a policies: section in --config, export only this trained policy's samples")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if *format != "jsonl" && *format != "parquet" {
		return usagef("--format %q: want jsonl or parquet", *format)
	}
	cfg := samples.Config{
		Build: samples.BuildConfig{NoMerge: *noMerge, MergeAcrossVersions: *acrossVersions,
			MaxPromptLen: *maxPrompt, MaxResponseLen: *maxResp, MaxSeqLen: *maxSeq, Rule: samples.LengthRule(*rule)},
		Reward:            samples.RewardConfig{Fill: *fill, Primary: *primary, AddCallRewards: *callRewards},
		Advantage:         samples.AdvantageConfig{Estimator: samples.Estimator(*estimator), Eps: *eps, DropZeroVariance: *dropZero},
		Aggregation:       samples.Aggregation(*agg),
		Credit:            samples.CreditConfig{Mode: samples.Credit(*credit), Gamma: *gamma},
		TrainAgents:       agents,
		DropMissingReward: *dropMissing,
		IncludeVal:        *includeVal,
	}
	if err := cfg.ValidateNames(); err != nil {
		return usagef("%w", err)
	}
	c, err := load()
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	pols, err := exportPolicies(c, agents, *policy)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	st, err := app.OpenReadStore(ctx, c.Config, "export", os.Stderr, newLogger())
	if err != nil {
		return fmt.Errorf("export: open store: %w", err)
	}
	defer st.Close()
	rs, evs, next, err := samples.Load(ctx, st, *after, *limit)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	var res samples.Result
	perPolicy := map[string]samples.Stats{}
	if pols == nil {
		if res, err = samples.FromRollouts(rs, evs, cfg); err != nil {
			return fmt.Errorf("export: %w", err)
		}
	}
	for _, p := range pols {
		// As agl train does: each trained policy's own agents' calls,
		// advantages normalised within the group per policy.
		pc := cfg
		pc.TrainAgents = p.agents
		r, err := samples.FromRollouts(rs, evs, pc)
		if err != nil {
			return fmt.Errorf("export: policy %s: %w", p.name, err)
		}
		res.Samples = append(res.Samples, r.Samples...)
		perPolicy[p.name] = r.Stats
	}

	w, report := stdout, io.Writer(os.Stderr)
	var f *os.File
	if *out != "-" && *out != "" {
		if f, err = os.Create(*out); err != nil {
			return fmt.Errorf("export: %w", err)
		}
		defer f.Close()
		w, report = f, stdout
	}
	if *format == "jsonl" {
		err = samples.WriteJSONL(w, res.Samples)
	} else {
		err = samples.WriteParquet(w, res.Samples)
	}
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if f != nil {
		if err := f.Close(); err != nil {
			return fmt.Errorf("export: %w", err)
		}
	}
	summary := struct {
		Next     int64                    `json:"next_cursor"`
		Out      string                   `json:"out"`
		Stats    *samples.Stats           `json:"stats,omitempty"`
		Policies map[string]samples.Stats `json:"policies,omitempty"`
	}{Next: next, Out: *out}
	if pols == nil {
		summary.Stats = &res.Stats
	} else {
		summary.Policies = perPolicy
	}
	b, err := json.Marshal(summary)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	_, err = fmt.Fprintf(report, "%s\n", b)
	return err
}

// exportPolicy is a trained policy of the config's `policies:` section
// and its agents.
type exportPolicy struct {
	name   string
	agents []string
}

// exportPolicies reads the config's `policies:` section: nil when it has
// none; else the trained policies (only the one named by --policy, when
// given), whose agents' calls train as in agl train while the frozen and
// upstream policies' calls are masked.
func exportPolicies(c app.Config, agents []string, only string) ([]exportPolicy, error) {
	if c.Policies == nil {
		if only != "" {
			return nil, fmt.Errorf("--policy %s: the config has no policies: section", only)
		}
		return nil, nil
	}
	if len(agents) > 0 {
		return nil, fmt.Errorf("--train-agent: with policies in the config, the policies' kinds say which agents train (use --policy)")
	}
	set, err := app.CheckPolicies(c.Policies, c.Engine, c.Proxy.Agents, nil, false)
	if err != nil {
		return nil, err
	}
	var out []exportPolicy
	for _, n := range set.Trained() {
		if only == "" || only == n {
			out = append(out, exportPolicy{name: n, agents: set.Agents(n)})
		}
	}
	if only != "" && len(out) == 0 {
		if p, ok := c.Policies[only]; ok {
			return nil, fmt.Errorf("--policy %s: a %s policy, not trained: its calls never train", only, p.Kind)
		}
		return nil, fmt.Errorf("--policy %s: no such policy (have %q)", only, set.Names())
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("policies: no policy of kind %s: nothing to export", app.PolicyTrained)
	}
	return out, nil
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/app"
	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/config"
	"github.com/aglrl/agl/model"
	"github.com/aglrl/agl/samples"
	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/trainer"
	"github.com/aglrl/agl/trainer/tinker"
)

// runSFT is `agl sft`: supervised fine-tuning of a model directory on a
// JSONL file of conversations (one chat.Conversation per line), with the
// loss on the assistant's tokens only (chat template's RenderMasked), or
// with --from on the calls a store recorded (samples.SFTSamples: their
// exact ids and loss masks).
func runSFT(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	modelDir := fs.String("model", "", "model directory (config.json, *.safetensors, tokenizer.json) (required)")
	data := fs.String("data", "", "JSONL file of conversations: {\"messages\":[...],\"tools\":[...]} per line")
	out := fs.String("out", "", "output checkpoint directory (required; may equal --model)")
	epochs := fs.Int("epochs", 1, "passes over the data")
	steps := fs.Int("steps", 0, "optimizer steps (overrides --epochs when > 0)")
	batchSize := fs.Int("batch-size", 8, "conversations per step")
	maxLen := fs.Int("max-len", 1024, "truncate rendered conversations (and stored samples) to this many tokens")
	lr := fs.Float64("lr", 1e-3, "AdamW learning rate")
	wd := fs.Float64("weight-decay", 0.01, "AdamW decoupled weight decay (matrices only)")
	clip := fs.Float64("clip", 1, "global gradient-norm clip (0: off)")
	warmup := fs.Int("warmup", 0, "linear learning-rate warmup steps")
	seed := fs.Uint64("seed", 1, "data order seed")
	backend := fs.String("backend", "", "GoMLX backend (default: the pure-Go one, ops in parallel; e.g. xla:cuda)")
	every := fs.Int("log-every", 0, "status line every N steps (default: about 20 lines)")
	evalPath := fs.String("eval", "", "JSONL of held-out conversations: after training, report their replies' loss and how many greedy decoding writes exactly")
	saveEvery := fs.Int("save-every", 100, "write the checkpoint to --out every N steps (0: only at the end); an interrupt (Ctrl-C) also saves the steps done")
	from := fs.String("from", "", "train on the stored calls of a data dir, or of a gateway (http URL; admin key from AGL_ADMIN_KEY), instead of --data: their exact token ids, loss on the responses")
	minReward := fs.String("min-reward", "", "with --from: only rollouts whose reward is at least this")
	mode := fs.String("mode", "", "with --from: only rollouts of this mode (train or val)")
	rlSteps := fs.String("rl-steps", "", "with --from: only rollouts of these training steps, A..B or A")
	var agents stringList
	fs.Var(&agents, "agent", "with --from: only this agent's calls (repeatable; \"\" the default agent)")
	policy := fs.String("policy", "", "with --from: only the calls served by this policy (model name)")
	tinkerPath := fs.String("tinker", "", "train a LoRA on a Tinker-compatible service instead (loss cross_entropy): a YAML file of a tinker policy's block (base_model, base_url, lora, …); --model holds the base model's tokenizer and chat template; --out gets tinker.json, the save_weights path")
	dryRun := fs.Bool("dry-run", false, "with --from: print what would train (one line per sample, then the totals) and stop")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	filter, err := sftFilter(*from, *minReward, *mode, *rlSteps, agents, *policy, *dryRun)
	if err != nil {
		return err
	}
	if *modelDir == "" || (*data == "") == (*from == "") || (*out == "" && !*dryRun) {
		return usagef("want --model DIR (--data FILE.jsonl | --from DATA_DIR|GATEWAY_URL) --out DIR")
	}
	tmpl, err := chat.LoadDir(*modelDir)
	if err != nil {
		return fmt.Errorf("sft: %w", err)
	}
	var examples []model.Example
	if *from != "" {
		if examples, err = storeExamples(ctx, *from, filter, *maxLen, *dryRun, stdout); err != nil || *dryRun {
			return err
		}
	} else if examples, err = readSFTData(*data, tmpl, *maxLen); err != nil {
		return err
	}
	var held []model.Example
	if *evalPath != "" { // read before training: a bad file fails fast
		if held, err = readSFTData(*evalPath, tmpl, *maxLen); err != nil {
			return err
		}
		if !slices.ContainsFunc(held, model.Example.Trained) {
			return fmt.Errorf("sft: eval %s: no conversation has an assistant reply", *evalPath)
		}
	}
	o := model.SFTOptions{Epochs: *epochs, Steps: *steps, BatchSize: *batchSize, Seed: *seed, WarmupSteps: *warmup, LR: *lr}
	total := o.Steps
	if total <= 0 {
		total = *epochs * ((len(examples) + *batchSize - 1) / *batchSize)
	}
	logEvery := *every
	if logEvery <= 0 {
		logEvery = max(1, total/20)
	}
	if *tinkerPath != "" {
		return sftTinker(ctx, fs, *tinkerPath, examples, o, logEvery, *out, stdout)
	}
	opt := model.DefaultAdamW()
	opt.LR, opt.WeightDecay, opt.ClipNorm = *lr, *wd, *clip
	w, err := model.Load(*modelDir)
	if err != nil {
		return err
	}
	if err := checkVocab(examples, w.Config.VocabSize, *modelDir); err != nil {
		return err
	}
	m, err := model.New(w.Config, model.TrainBackend(*backend))
	if err != nil {
		return err
	}
	tr, err := model.NewTrainer(m, w, opt)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "sft: %d conversations, %d steps of %d, model %s parameters\n", len(examples), total, *batchSize, human(w.Config.NumParams()))
	save := func() error {
		if err := tr.SaveCheckpoint(*out); err != nil {
			return err
		}
		return chat.CopyTokenizerFiles(*modelDir, *out)
	}
	var saveErr error
	last, err := model.SFT(ctx, tr, examples, o, func(p model.SFTProgress) {
		if p.Step%logEvery == 0 || p.Step == p.Steps {
			fmt.Fprintln(stdout, progressLine(p))
		}
		if *saveEvery > 0 && p.Step%*saveEvery == 0 && p.Step < p.Steps && saveErr == nil {
			saveErr = save()
		}
	})
	if saveErr != nil {
		return fmt.Errorf("sft: checkpoint: %w", saveErr)
	}
	if err != nil {
		if ctx.Err() != nil && last.Step > 0 {
			if serr := save(); serr != nil {
				return fmt.Errorf("sft: interrupted at step %d/%d, and the checkpoint failed: %w", last.Step, last.Steps, serr)
			}
			return fmt.Errorf("sft: interrupted at step %d/%d (loss %.4f); checkpoint of the steps done in %s", last.Step, last.Steps, last.Loss, *out)
		}
		return fmt.Errorf("sft: %w", err)
	}
	if err := save(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "sft: done, loss %.4f, checkpoint in %s\n", last.Loss, *out)
	if held == nil {
		return nil
	}
	return evalHeldOut(ctx, *out, *backend, *evalPath, held, tmpl.StopIDs(), stdout)
}

// sftTinker is agl sft --tinker: the examples train a LoRA of the
// block's base model on its service with cross_entropy (the block's loss
// setting is not used); the weights are then saved for sampling and with
// their optimizer state, both tinker:// paths printed, the state's kept
// in out/tinker.json.
func sftTinker(ctx context.Context, fs *flag.FlagSet, path string, examples []model.Example, o model.SFTOptions, logEvery int, out string, stdout io.Writer) error {
	var embeddedOnly []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "backend", "eval", "save-every", "weight-decay", "clip":
			embeddedOnly = append(embeddedOnly, "--"+f.Name)
		}
	})
	if len(embeddedOnly) > 0 {
		return usagef("%s: not with --tinker (weight_decay and grad_clip_norm are keys of the tinker block)", strings.Join(embeddedOnly, ", "))
	}
	tc, err := tinker.LoadConfig(path)
	if err != nil {
		return fmt.Errorf("sft: %w", err)
	}
	tc.Loss = tinker.LossCrossEntropy
	p, err := tc.Open(ctx, "sft", trainer.Config{LR: o.LR}, "", 0)
	if err != nil {
		return fmt.Errorf("sft: %w", err)
	}
	defer p.Close()
	fmt.Fprintf(stdout, "sft: %d conversations, LoRA rank %d of %s\n", len(examples), tc.LoRA.Rank, tc.BaseModel)
	last, err := model.SFT(ctx, p, examples, o, func(sp model.SFTProgress) {
		if sp.Step%logEvery == 0 || sp.Step == sp.Steps {
			fmt.Fprintln(stdout, progressLine(sp))
		}
	})
	if err != nil {
		return fmt.Errorf("sft: %w", err)
	}
	sampler, state, err := p.Save(ctx, out, 1)
	if err != nil {
		return fmt.Errorf("sft: %w", err)
	}
	fmt.Fprintf(stdout, "sft: done, loss %.4f\nsft: sampler weights %s\nsft: weights and optimizer state %s (in %s)\n",
		last.Loss, sampler, state, filepath.Join(out, "tinker.json"))
	return nil
}

// sftFilter reads the --from filter flags (refused without --from).
func sftFilter(from, minReward, mode, steps string, agents []string, policy string, dryRun bool) (samples.SFTFilter, error) {
	f := samples.SFTFilter{Mode: store.Mode(mode), Agents: agents, Policy: policy}
	if from == "" {
		if minReward != "" || mode != "" || steps != "" || agents != nil || policy != "" || dryRun {
			return f, usagef("--min-reward, --mode, --rl-steps, --agent, --policy and --dry-run select stored calls: they need --from")
		}
		return f, nil
	}
	if minReward != "" {
		r, err := strconv.ParseFloat(minReward, 64)
		if err != nil || math.IsNaN(r) {
			return f, usagef("--min-reward %q: want a number", minReward)
		}
		f.MinReward = &r
	}
	if mode != "" && f.Mode != store.ModeTrain && f.Mode != store.ModeVal {
		return f, usagef("--mode %q: want train or val", mode)
	}
	if steps != "" {
		r, err := samples.ParseStepRange(steps)
		if err != nil {
			return f, usagef("--rl-steps: %v", err)
		}
		f.Steps = &r
	}
	return f, nil
}

// storeExamples reads the terminal rollouts of a data dir (read-only,
// beside a running gateway) or of a gateway's API and turns the calls f
// selects into examples (samples.SFTSamples). An empty selection is
// refused, naming the filter; dryRun prints the samples and totals.
func storeExamples(ctx context.Context, from string, f samples.SFTFilter, maxLen int, dryRun bool, stdout io.Writer) ([]model.Example, error) {
	var src samples.Source
	if strings.HasPrefix(from, "http://") || strings.HasPrefix(from, "https://") {
		src = api.Source{Client: api.NewClient(from, os.Getenv("AGL_ADMIN_KEY"))}
	} else {
		if _, err := os.Stat(from); err != nil {
			return nil, fmt.Errorf("sft: --from: %w", err)
		}
		st, err := app.OpenReadStore(ctx, config.Config{DataDir: from}, "sft", os.Stderr, newLogger())
		if err != nil {
			return nil, fmt.Errorf("sft: --from %s: %w", from, err)
		}
		defer st.Close()
		src = st
	}
	rs, evs, _, err := samples.Load(ctx, src, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("sft: --from %s: %w", from, err)
	}
	ss, stats := samples.SFTSamples(rs, evs, f, samples.BuildConfig{MaxSeqLen: maxLen, MergeAcrossVersions: true})
	if len(ss) == 0 {
		return nil, fmt.Errorf("sft: --from %s: no stored call to train on matches the filter (%s): %s", from, f, stats.Why())
	}
	if dryRun {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ROLLOUT\tATTEMPT\tAGENT\tCALLS\tTOKENS\tTRAINED\tREWARD")
		for _, s := range ss {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%g\n", s.RolloutID, s.AttemptID, dash(s.Agent), len(s.CallIDs), len(s.IDs), s.Trained(), s.Reward)
		}
		tw.Flush()
	}
	fmt.Fprintf(stdout, "sft: --from %s (%s): %d samples, %d tokens (%d trained) from %d of %d rollouts; %d duplicate samples and %d retried calls left out\n",
		from, f, stats.Samples, stats.Tokens, stats.TrainedTokens, stats.Matched, stats.Rollouts, stats.Duplicates, stats.RetriedCalls)
	out := make([]model.Example, len(ss))
	for i, s := range ss {
		mask := make([]bool, len(s.LossMask))
		for j, m := range s.LossMask {
			mask[j] = m == 1
		}
		out[i] = model.Example{IDs: s.IDs, Mask: mask}
	}
	return out, nil
}

// checkVocab refuses examples with ids the model's vocabulary does not
// hold (stored calls of another model's tokenizer).
func checkVocab(examples []model.Example, vocab int, dir string) error {
	for i, ex := range examples {
		for _, id := range ex.IDs {
			if id < 0 || int(id) >= vocab {
				return fmt.Errorf("sft: example %d holds token id %d, outside the vocabulary of %s (%d ids): data of another tokenizer?", i+1, id, dir, vocab)
			}
		}
	}
	return nil
}

// evalHeldOut reports how the checkpoint in dir does on held-out
// conversations: one line with the replies' loss and the replies greedy
// decoding writes exactly, by position (reply 1 of each conversation, …).
func evalHeldOut(ctx context.Context, dir, backend, path string, held []model.Example, stop []int32, stdout io.Writer) error {
	eng, err := model.OpenEngine(dir, backend, 0, model.EngineOptions{})
	if err != nil {
		return fmt.Errorf("sft: eval: %w", err)
	}
	defer eng.Close()
	r, err := model.EvalReplies(ctx, eng, held, stop)
	if err != nil {
		return fmt.Errorf("sft: eval %s: %w", path, err)
	}
	exact, replies := r.ExactTotal()
	var by []string
	for k := range r.Replies {
		by = append(by, fmt.Sprintf("%d: %d/%d", k+1, r.Exact[k], r.Replies[k]))
	}
	fmt.Fprintf(stdout, "sft: eval %s: %d conversations, loss %.4f a reply token; greedy decoding writes %d of %d replies exactly (by position %s)\n",
		path, r.Conversations, r.Loss, exact, replies, strings.Join(by, ", "))
	return nil
}

// progressLine renders a bar and the step's figures.
func progressLine(p model.SFTProgress) string {
	const width = 24
	done := width * p.Step / max(1, p.Steps)
	bar := strings.Repeat("=", done) + strings.Repeat(" ", width-done)
	eta := time.Duration(0)
	if p.Step > 0 {
		eta = time.Duration(float64(p.Elapsed) / float64(p.Step) * float64(p.Steps-p.Step)).Round(time.Second)
	}
	return fmt.Sprintf("[%s] %d/%d epoch %d loss %.4f  %.0f tok/s  elapsed %s eta %s",
		bar, p.Step, p.Steps, p.Epoch, p.Loss, p.TokensPerSec, p.Elapsed.Round(time.Second), eta)
}

// maskedRenderer is the part of a chat template SFT needs.
type maskedRenderer interface {
	RenderMasked(c chat.Conversation) (ids []int32, mask []bool, err error)
}

// readSFTData renders every conversation of a JSONL file with the loss
// mask of the assistant's tokens.
func readSFTData(path string, tmpl maskedRenderer, maxLen int) ([]model.Example, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("sft: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var out []model.Example
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var c chat.Conversation
		if err := json.Unmarshal([]byte(text), &c); err != nil {
			return nil, fmt.Errorf("sft: %s:%d: %w", path, line, err)
		}
		ids, mask, err := tmpl.RenderMasked(c)
		if err != nil {
			return nil, fmt.Errorf("sft: %s:%d: %w", path, line, err)
		}
		if maxLen > 0 && len(ids) > maxLen {
			ids, mask = ids[:maxLen], mask[:maxLen]
		}
		out = append(out, model.Example{IDs: ids, Mask: mask})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("sft: %s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("sft: %s: no conversations", path)
	}
	return out, nil
}

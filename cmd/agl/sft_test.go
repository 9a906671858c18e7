package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/model"
)

// TestModelInitSFTLearnsToyTask runs `agl model init` and `agl sft` on a
// toy copy task (the assistant repeats the user's 4 letters) and checks
// the loss on the assistant tokens falls below a bound.
func TestModelInitSFTLearnsToyTask(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	testutil.SkipRace(t, "151 SFT steps and greedy evaluations on one goroutine: numerics")
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.json")
	cfg := `{"model_type":"qwen3","hidden_size":64,"intermediate_size":192,"num_hidden_layers":2,
		"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"rms_norm_eps":1e-6,"rope_theta":10000,
		"max_position_embeddings":256,"tie_word_embeddings":true}`
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	modelDir := filepath.Join(dir, "init")
	var out bytes.Buffer
	ctx := context.Background()
	if err := run(ctx, []string{"model", "init", "--config", cfgPath, "--out", modelDir}, &out, &out); err != nil {
		t.Fatal(err)
	}
	w, err := model.Load(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	if n := w.Config.NumParams(); n > 1_000_000 {
		t.Fatalf("toy model has %d parameters, want ≤ 1M", n)
	}
	// Toy data: n conversations in which the assistant repeats 4 random letters.
	rng := rand.New(rand.NewPCG(1, 1))
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	copyTask := func(name string, n int) string {
		var data strings.Builder
		for range n {
			var s []byte
			for range 4 {
				s = append(s, "abcdefgh"[rng.IntN(8)])
			}
			b, _ := json.Marshal(chat.Conversation{Messages: []chat.Message{{Role: chat.RoleUser, Content: string(s)}, {Role: chat.RoleAssistant, Content: string(s)}}})
			data.Write(append(b, '\n'))
		}
		return write(name, data.String())
	}
	dataPath := copyTask("toy.jsonl", 512)
	// Held-out conversations: strings the training data may not hold.
	heldPath := copyTask("held.jsonl", 32)
	evalRE := regexp.MustCompile(`eval .*held\.jsonl: 32 conversations, loss ([0-9.]+) a reply token; greedy decoding writes (\d+) of 32 replies exactly \(by position 1: (\d+)/32\)`)
	exact := func(out string) (loss float64, n int) {
		t.Helper()
		m := evalRE.FindStringSubmatch(out)
		if m == nil || m[2] != m[3] {
			t.Fatalf("no eval line in output:\n%s", out)
		}
		loss, _ = strconv.ParseFloat(m[1], 64)
		n, _ = strconv.Atoi(m[2])
		return loss, n
	}
	// The untrained model (one step at a negligible rate) copies none.
	out.Reset()
	if err := run(ctx, []string{"sft", "--model", modelDir, "--data", dataPath, "--out", filepath.Join(dir, "untrained"), "--steps", "1",
		"--lr", "1e-12", "--eval", heldPath}, &out, &out); err != nil {
		t.Fatal(err)
	}
	untrainedLoss, untrained := exact(out.String())
	outDir := filepath.Join(dir, "sft")
	out.Reset()
	if err := run(ctx, []string{"sft", "--model", modelDir, "--data", dataPath, "--out", outDir, "--steps", "150",
		"--batch-size", "16", "--lr", "3e-3", "--log-every", "25", "--eval", heldPath}, &out, &out); err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	heldLoss, trained := exact(out.String())
	if untrained > 1 || trained < 24 || heldLoss > untrainedLoss/3 {
		t.Errorf("held-out replies written exactly: %d of 32 untrained (loss %.3f), %d trained (loss %.3f); want ≤ 1, ≥ 24 and a third of the loss",
			untrained, untrainedLoss, trained, heldLoss)
	}
	// A bad eval file fails before any training, naming the file and what is wrong.
	for _, c := range []struct{ path, want string }{
		{filepath.Join(dir, "missing.jsonl"), "missing.jsonl"},
		{write("empty.jsonl", ""), "empty.jsonl: no conversations"},
		{write("noreply.jsonl", `{"messages":[{"role":"user","content":"abcd"}]}`+"\n"), "noreply.jsonl: no conversation has an assistant reply"},
		{write("broken.jsonl", `{"messages":[{"role":"user","content":"ab`+"\n"), "broken.jsonl:1"},
		{write("badrole.jsonl", `{"messages":[{"role":"wizard","content":"ab"}]}`+"\n"), "badrole.jsonl:1"},
	} {
		if err := run(ctx, []string{"sft", "--model", modelDir, "--data", dataPath, "--out", filepath.Join(dir, "x"), "--steps", "1",
			"--eval", c.path}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("eval file %s: error %v, want one naming %q", filepath.Base(c.path), err, c.want)
		}
		if _, err := os.Stat(filepath.Join(dir, "x")); !os.IsNotExist(err) {
			t.Errorf("eval file %s: trained anyway: %v", filepath.Base(c.path), err)
		}
	}
	m := regexp.MustCompile(`done, loss ([0-9.]+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no final loss in output:\n%s", out.String())
	}
	loss, _ := strconv.ParseFloat(m[1], 64)
	// Per assistant token: 4 letters (ln 8 ≈ 2.08 nats each at chance) and
	// the end of turn; the bound needs the copy learned.
	const bound = 0.35
	if loss > bound {
		t.Errorf("final loss %.4f, want < %v", loss, bound)
	}
	if !strings.Contains(out.String(), "[====") {
		t.Errorf("no progress bar in output")
	}
	out.Reset()
	if err := run(ctx, []string{"model", "info", outDir}, &out, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"qwen3", "optimizer:      AdamW state at step 150", "tokenizer:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("model info lacks %q:\n%s", want, out.String())
		}
	}
}

func TestModelInitPresetAndErrors(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "m")
	var out bytes.Buffer
	if err := run(ctx, []string{"model", "init", "--preset", "1m", "--out", dir, "--seed", "3"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "initialized qwen3 model with 8") || !strings.Contains(out.String(), "k parameters") {
		t.Errorf("init output: %s", out.String())
	}
	out.Reset()
	if err := run(ctx, []string{"model", "info", dir}, &out, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"layers 4, hidden 128", "vocabulary:     265", "finite true", "chat stop ids"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("info lacks %q:\n%s", want, out.String())
		}
	}
	bad := [][]string{
		{},
		{"frobnicate"},
		{"init", "--out", dir},
		{"init", "--preset", "1m"},
		{"init", "--preset", "huge", "--out", dir},
		{"info"},
		{"info", t.TempDir()},
	}
	for _, args := range bad {
		if err := run(ctx, append([]string{"model"}, args...), &out, &out); err == nil {
			t.Errorf("agl model %q: no error", args)
		}
	}
	// A BPE learned from conversations: a bigger vocabulary, shorter
	// sequences, and a model directory SFT can use.
	data := filepath.Join(t.TempDir(), "conv.jsonl")
	var sb strings.Builder
	for i := range 50 {
		b, _ := json.Marshal(chat.Conversation{Messages: []chat.Message{
			{Role: chat.RoleUser, Content: "What is " + strconv.Itoa(i) + " plus 2?"}, {Role: chat.RoleAssistant, Content: "The answer is " + strconv.Itoa(i+2) + "."}}})
		sb.Write(append(b, '\n'))
	}
	if err := os.WriteFile(data, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	bdir := filepath.Join(t.TempDir(), "bpe")
	out.Reset()
	if err := run(ctx, []string{"model", "init", "--preset", "tiny", "--bpe-data", data, "--bpe-merges", "40", "--out", bdir}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`learned a byte-level BPE of (\d+) tokens`).FindStringSubmatch(out.String()); m == nil {
		t.Errorf("init --bpe-data output: %s", out.String())
	} else if n, _ := strconv.Atoi(m[1]); n <= 265 || n > 265+40 {
		t.Errorf("BPE vocabulary %d, want 265 < n ≤ 305 (40 merges at most)", n)
	}
	tmpl, err := chat.LoadDir(bdir)
	if err != nil {
		t.Fatal(err)
	}
	bex, err := readSFTData(data, tmpl, 0)
	if err != nil {
		t.Fatal(err)
	}
	byteTmpl, _ := chat.LoadDir(dir)
	yex, _ := readSFTData(data, byteTmpl, 0)
	if len(bex[0].IDs)*2 > len(yex[0].IDs) {
		t.Errorf("BPE sequence %d tokens, byte sequence %d: want under half", len(bex[0].IDs), len(yex[0].IDs))
	}
	if err := run(ctx, []string{"sft", "--model", bdir, "--data", data, "--out", bdir, "--steps", "2"}, &out, &out); err != nil {
		t.Errorf("sft on the BPE model: %v", err)
	}
	if err := run(ctx, []string{"model", "init", "--preset", "tiny", "--bpe-data", data, "--tokenizer", filepath.Join(dir, "tokenizer.json"), "--out", bdir}, &out, &out); err == nil {
		t.Error("--bpe-data with --tokenizer: no error")
	}
	if err := run(ctx, []string{"model", "init", "--preset", "tiny", "--bpe-data", "/nonexistent.jsonl", "--out", bdir}, &out, &out); err == nil {
		t.Error("--bpe-data of a missing file: no error")
	}
	for _, args := range [][]string{{}, {"--model", dir, "--data", "/nonexistent.jsonl", "--out", dir}} {
		if err := run(ctx, append([]string{"sft"}, args...), &out, &out); err == nil {
			t.Errorf("agl sft %q: no error", args)
		}
	}
}

// cancelAt is an io.Writer for agl sft's output that cancels a context when
// a line containing mark is written, after running check (if any).
type cancelAt struct {
	mark   string
	cancel context.CancelFunc
	check  func(line string)
	buf    bytes.Buffer
}

func (c *cancelAt) Write(p []byte) (int, error) {
	c.buf.Write(p)
	if c.check != nil {
		c.check(string(p))
	}
	if strings.Contains(string(p), c.mark) {
		c.cancel()
	}
	return len(p), nil
}

// TestSFTCheckpointsEveryAndOnInterrupt: --save-every writes the checkpoint
// during the run, and an interrupt saves the steps done (a long warm start
// stopped with Ctrl-C loses nothing) and says so in its error.
func TestSFTCheckpointsEveryAndOnInterrupt(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	dir := t.TempDir()
	init, data, out := filepath.Join(dir, "init"), filepath.Join(dir, "d.jsonl"), filepath.Join(dir, "sft")
	if err := run(context.Background(), []string{"model", "init", "--preset", "tiny", "--out", init}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for i := range 64 {
		b, _ := json.Marshal(chat.Conversation{Messages: []chat.Message{
			{Role: chat.RoleUser, Content: strconv.Itoa(i)}, {Role: chat.RoleAssistant, Content: strconv.Itoa(i)}}})
		sb.Write(append(b, '\n'))
	}
	if err := os.WriteFile(data, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	step := func() int64 {
		w, err := model.Load(out)
		if err != nil {
			t.Fatalf("no checkpoint in %s: %v", out, err)
		}
		m, err := model.New(w.Config, "")
		if err != nil {
			t.Fatal(err)
		}
		tr, err := model.LoadTrainer(m, out, model.DefaultAdamW())
		if err != nil {
			t.Fatal(err)
		}
		return tr.Step()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sawSaved := false
	w := &cancelAt{mark: " 6/10 ", cancel: cancel, check: func(line string) {
		if strings.Contains(line, " 5/10 ") {
			sawSaved = step() == 4 // saved at step 4, not yet at 5
		}
	}}
	err := run(ctx, []string{"sft", "--model", init, "--data", data, "--out", out, "--steps", "10", "--batch-size", "8",
		"--log-every", "1", "--save-every", "4"}, w, w)
	if err == nil || !strings.Contains(err.Error(), "interrupted at step 6/10") {
		t.Fatalf("err = %v, want an interrupt at step 6/10\n%s", err, w.buf.String())
	}
	if !sawSaved {
		t.Error("no checkpoint of step 4 while step 5 was reported (--save-every 4)")
	}
	if got := step(); got != 6 {
		t.Errorf("checkpoint after the interrupt has step %d, want 6", got)
	}
	if _, err := os.Stat(filepath.Join(out, "tokenizer.json")); err != nil {
		t.Errorf("checkpoint is not a usable model directory: %v", err)
	}
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/model"
	"github.com/aglrl/agl/model/safetensors"
	"github.com/aglrl/agl/tokenizer"
)

// runModelInfo is `agl model info DIR`.
func runModelInfo(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want one model directory, got %d arguments", fs.NArg())
	}
	return modelInfo(fs.Arg(0), stdout)
}

// runModelInit is `agl model init`.
func runModelInit(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	configPath := fs.String("config", "", "Hugging Face style config.json giving the architecture and size (vocab_size 0: the tokenizer's)")
	preset := fs.String("preset", "", "instead of --config, a named size: tiny, 1m, 10m, 30m (Qwen3-style)")
	out := fs.String("out", "", "output model directory (required)")
	tokPath := fs.String("tokenizer", "", "tokenizer.json to copy (default: agl's byte tokenizer with chat special tokens)")
	bpeData := fs.String("bpe-data", "", "instead of --tokenizer, learn a byte-level BPE from this JSONL of conversations (the agl sft format), rendered with the chatml-compact template")
	merges := fs.Int("bpe-merges", 400, "with --bpe-data: the number of merges (vocabulary = 256 bytes + merges + chat special tokens)")
	seed := fs.Uint64("seed", 1, "random seed of the initialization")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if *out == "" || (*configPath == "") == (*preset == "") {
		return usagef("want --out DIR and exactly one of --config FILE or --preset NAME")
	}
	if *tokPath != "" && *bpeData != "" {
		return usagef("--tokenizer and --bpe-data exclude each other")
	}
	// The tokenizer decides the vocabulary.
	var tok tokenizer.Tokenizer
	var tokJSON []byte // tokenizer.json to write, when not agl's byte tokenizer
	var err error
	switch {
	case *tokPath != "":
		if tokJSON, err = os.ReadFile(*tokPath); err != nil {
			return fmt.Errorf("model init: %w", err)
		}
		if tok, err = tokenizer.Parse(tokJSON); err != nil {
			return fmt.Errorf("model init: %s: %w", *tokPath, err)
		}
	case *bpeData != "":
		if tokJSON, err = trainBPE(*bpeData, *merges); err != nil {
			return err
		}
		if tok, err = tokenizer.Parse(tokJSON); err != nil {
			return err
		}
	default:
		if tok, err = tokenizer.NewByte(); err != nil {
			return err
		}
	}
	var cfg model.Config
	if *preset != "" {
		if cfg, err = model.Preset(*preset, tok.VocabSize()); err != nil {
			return err
		}
	} else {
		if cfg, err = readInitConfig(*configPath, tok.VocabSize()); err != nil {
			return err
		}
	}
	if cfg.VocabSize < tok.VocabSize() {
		return fmt.Errorf("model init: vocab_size %d is smaller than the tokenizer's %d", cfg.VocabSize, tok.VocabSize())
	}
	w, err := model.NewRandom(cfg, *seed)
	if err != nil {
		return err
	}
	if err := w.Save(*out); err != nil {
		return err
	}
	switch {
	case *bpeData != "":
		if err := tokenizer.SaveFile(filepath.Join(*out, tokenizer.FileName), tokJSON); err != nil {
			return err
		}
		if err := chat.SaveConfig(*out, chat.Config{Template: chat.TemplateChatMLCompact}); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "learned a byte-level BPE of %d tokens from %s\n", tok.VocabSize(), *bpeData)
	case *tokPath != "":
		if err := tokenizer.SaveFile(filepath.Join(*out, tokenizer.FileName), tokJSON); err != nil {
			return err
		}
	default:
		if err := chat.SaveDir(*out, tok, chat.Config{Template: chat.TemplateChatMLCompact}); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "initialized %s model with %s parameters in %s\n", w.Config.ModelType, human(w.Config.NumParams()), *out)
	return nil
}

// trainBPE renders the conversations of a JSONL file with the
// chatml-compact template and learns a byte-level BPE from the text.
func trainBPE(path string, merges int) ([]byte, error) {
	bt, err := tokenizer.NewByte()
	if err != nil {
		return nil, err
	}
	tmpl, err := chat.New(bt, chat.Config{Template: chat.TemplateChatMLCompact})
	if err != nil {
		return nil, err
	}
	examples, err := readSFTData(path, tmpl, 0)
	if err != nil {
		return nil, fmt.Errorf("model init: %w", err)
	}
	texts := make([]string, len(examples))
	for i, ex := range examples {
		texts[i] = bt.Decode(ex.IDs)
	}
	data, err := tokenizer.TrainBPE(texts, merges)
	if err != nil {
		return nil, fmt.Errorf("model init: %w", err)
	}
	return data, nil
}

// readInitConfig reads a config.json, filling vocab_size from the tokenizer
// when it is 0.
func readInitConfig(path string, vocab int) (model.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return model.Config{}, fmt.Errorf("model init: %w", err)
	}
	c, err := model.DecodeConfig(data, vocab)
	if err != nil {
		return c, fmt.Errorf("model init: %s: %w", path, err)
	}
	return c, nil
}

func modelInfo(dir string, stdout io.Writer) error {
	w, err := model.Load(dir)
	if err != nil {
		return err
	}
	c := w.Config
	st := w.Stats()
	fmt.Fprintf(stdout, "directory:      %s\n", dir)
	fmt.Fprintf(stdout, "architecture:   %s (layers %d, hidden %d, mlp %d, heads %d/%d kv, head dim %d)\n",
		c.ModelType, c.NumHiddenLayers, c.HiddenSize, c.IntermediateSize, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim)
	fmt.Fprintf(stdout, "vocabulary:     %d (tied embeddings: %v)\n", c.VocabSize, c.TieWordEmbeddings)
	fmt.Fprintf(stdout, "context:        %d positions, rope theta %g\n", c.MaxPositionEmbeddings, c.RopeTheta)
	fmt.Fprintf(stdout, "parameters:     %s (%d), weight rms %.4g, finite %v\n", human(st.NumParams), st.NumParams, st.RMS, st.Finite)
	if t, err := chat.LoadDir(dir); err == nil {
		fmt.Fprintf(stdout, "tokenizer:      %d ids, chat stop ids %v\n", t.Tokenizer().VocabSize(), t.StopIDs())
	} else {
		fmt.Fprintf(stdout, "tokenizer:      none usable (%v)\n", err)
	}
	if f, err := safetensors.ReadFile(filepath.Join(dir, model.OptimizerFile)); err == nil {
		fmt.Fprintf(stdout, "optimizer:      AdamW state at step %s\n", f.Metadata["step"])
	}
	return nil
}

func human(n int) string {
	switch {
	case n >= 1e9:
		return strconv.FormatFloat(float64(n)/1e9, 'f', 2, 64) + "B"
	case n >= 1e6:
		return strconv.FormatFloat(float64(n)/1e6, 'f', 2, 64) + "M"
	case n >= 1e3:
		return strconv.FormatFloat(float64(n)/1e3, 'f', 1, 64) + "k"
	}
	return strconv.Itoa(n)
}

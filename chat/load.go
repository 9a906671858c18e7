package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/aglrl/agl/tokenizer"
)

// ConfigFileName is the file in a model directory that names its chat
// template (next to tokenizer.json). Hugging Face checkpoints do not have
// it; for them the template is inferred from the tokenizer (see LoadDir).
const ConfigFileName = "agl_chat.json"

// Template names for Config.Template.
const (
	// TemplateChatML is ChatML with Qwen/Hermes tool calling (Qwen2.5,
	// Qwen3 and agl's own models).
	TemplateChatML = "chatml"
	// TemplateChatMLCompact is TemplateChatML with tool definitions
	// rendered one line per tool, for small models.
	TemplateChatMLCompact = "chatml-compact"
	// TemplateLlama3 is Llama 3 / 3.1 (JSON tool calls, ipython results).
	TemplateLlama3 = "llama3"
)

// Format is a chat template together with its tokenizer: what a model
// directory loads to. [*ChatML] and [*Llama3] implement it.
type Format interface {
	Template
	// Tokenizer is the tokenizer the template renders with.
	Tokenizer() tokenizer.Tokenizer
	// RenderMasked renders c like Render(c, false) and marks the tokens
	// the model produces (each assistant reply and its end-of-turn id),
	// for the loss of supervised training.
	RenderMasked(c Conversation) (ids []int32, mask []bool, err error)
	// EndOfTurnID is the stop id that ends an assistant turn; the
	// extension property holds for replies that end with it.
	EndOfTurnID() int32
}

var (
	_ Format = (*ChatML)(nil)
	_ Format = (*Llama3)(nil)
)

// Config is the content of agl_chat.json.
type Config struct {
	// Template is TemplateChatML, TemplateChatMLCompact or TemplateLlama3.
	Template string `json:"template"`
	// DisableThinking is Qwen3's enable_thinking=false (see
	// ChatMLOptions.DisableThinking; ChatML only).
	DisableThinking bool `json:"disable_thinking,omitempty"`
}

// New returns the template cfg names, over tok.
func New(tok tokenizer.Tokenizer, cfg Config) (Format, error) {
	switch cfg.Template {
	case TemplateLlama3:
		return NewLlama3(tok)
	case TemplateChatML, "":
		return NewChatML(tok, ChatMLOptions{DisableThinking: cfg.DisableThinking})
	case TemplateChatMLCompact:
		return NewChatML(tok, ChatMLOptions{CompactTools: true, DisableThinking: cfg.DisableThinking})
	}
	return nil, fmt.Errorf("chat: unknown template %q (want %q, %q or %q)", cfg.Template, TemplateChatML, TemplateChatMLCompact, TemplateLlama3)
}

// NewSmall returns the default setup of a small model trained from
// scratch: a byte tokenizer with tokenizer.ChatSpecialTokens and the
// compact ChatML template. Save it with SaveDir.
func NewSmall() (*ChatML, error) {
	tok, err := tokenizer.NewByte()
	if err != nil {
		return nil, err
	}
	return NewChatML(tok, ChatMLOptions{CompactTools: true})
}

// LoadConfig reads dir/agl_chat.json. It reports ok=false (and no error)
// when the file does not exist.
func LoadConfig(dir string) (cfg Config, ok bool, err error) {
	data, err := os.ReadFile(filepath.Join(dir, ConfigFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return Config{}, false, nil
	}
	if err != nil {
		return Config{}, false, fmt.Errorf("chat: %w", err)
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return Config{}, false, fmt.Errorf("chat: %s: %w", filepath.Join(dir, ConfigFileName), err)
	}
	return cfg, true, nil
}

// SaveConfig writes dir/agl_chat.json.
func SaveConfig(dir string, cfg Config) error {
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ConfigFileName), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("chat: save config: %w", err)
	}
	return nil
}

// SaveDir writes tok as dir/tokenizer.json and cfg as dir/agl_chat.json.
// Only byte tokenizers are written (a loaded Hugging Face tokenizer.json
// should be copied as a file).
func SaveDir(dir string, tok tokenizer.Tokenizer, cfg Config) error {
	b, ok := tok.(*tokenizer.Byte)
	if !ok {
		return fmt.Errorf("chat: SaveDir: cannot write a %T; copy its tokenizer.json instead", tok)
	}
	if err := b.Save(filepath.Join(dir, tokenizer.FileName)); err != nil {
		return err
	}
	return SaveConfig(dir, cfg)
}

// CopyTokenizerFiles copies the tokenizer and chat files of model
// directory from (tokenizer.json, agl_chat.json, tokenizer_config.json;
// those it has) into to, so that weights written there (an SFT output, a
// training checkpoint) load as a model directory of their own.
func CopyTokenizerFiles(from, to string) error {
	if filepath.Clean(from) == filepath.Clean(to) {
		return nil
	}
	for _, name := range []string{tokenizer.FileName, ConfigFileName, "tokenizer_config.json"} {
		data, err := os.ReadFile(filepath.Join(from, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("chat: %w", err)
		}
		if err := os.WriteFile(filepath.Join(to, name), data, 0o644); err != nil {
			return fmt.Errorf("chat: %w", err)
		}
	}
	return nil
}

// LoadDir loads a model directory's tokenizer (dir/tokenizer.json) and
// chat template (dir/agl_chat.json). Without agl_chat.json the template is
// inferred: a tokenizer with <|im_start|> and <|im_end|> (Qwen2/2.5/3,
// agl's byte tokenizer) gets TemplateChatML, one with <|start_header_id|>
// and <|eot_id|> gets TemplateLlama3; any other is an error naming the file
// to write. The tokenizer is Format.Tokenizer().
func LoadDir(dir string) (Format, error) {
	tok, err := tokenizer.LoadDir(dir)
	if err != nil {
		return nil, err
	}
	cfg, ok, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	if !ok {
		has := func(s string) bool { _, ok := tok.TokenID(s); return ok }
		switch {
		case has(TokIMStart) && has(TokIMEnd):
			cfg = Config{Template: TemplateChatML}
		case has(TokHeaderStart) && has(TokEOT):
			cfg = Config{Template: TemplateLlama3}
		default:
			return nil, fmt.Errorf("chat: %s: no %s, and the tokenizer has neither ChatML nor Llama 3 header tokens to infer a template from", dir, ConfigFileName)
		}
	}
	t, err := New(tok, cfg)
	if err != nil {
		return nil, fmt.Errorf("chat: %s: %w", dir, err)
	}
	return t, nil
}

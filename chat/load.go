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
)

// Config is the content of agl_chat.json.
type Config struct {
	// Template is TemplateChatML or TemplateChatMLCompact.
	Template string `json:"template"`
	// DisableThinking is Qwen3's enable_thinking=false (see
	// ChatMLOptions.DisableThinking).
	DisableThinking bool `json:"disable_thinking,omitempty"`
}

// New returns the template cfg names, over tok.
func New(tok tokenizer.Tokenizer, cfg Config) (*ChatML, error) {
	switch cfg.Template {
	case TemplateChatML, "":
		return NewChatML(tok, ChatMLOptions{DisableThinking: cfg.DisableThinking})
	case TemplateChatMLCompact:
		return NewChatML(tok, ChatMLOptions{CompactTools: true, DisableThinking: cfg.DisableThinking})
	}
	return nil, fmt.Errorf("chat: unknown template %q (want %q or %q)", cfg.Template, TemplateChatML, TemplateChatMLCompact)
}

// NewSmall returns the default setup of a small model trained from
// scratch: a byte tokenizer with tokenizer.ChatSpecialTokens and the
// compact ChatML template. Save it with SaveDir.
func NewSmall() (*ChatML, error) {
	tok, err := tokenizer.NewByte()
	if err != nil {
		return nil, err
	}
	return New(tok, Config{Template: TemplateChatMLCompact})
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

// LoadDir loads a model directory's tokenizer (dir/tokenizer.json) and
// chat template (dir/agl_chat.json). Without agl_chat.json, a tokenizer
// with <|im_start|> and <|im_end|> (Qwen2/2.5/3, agl's byte tokenizer)
// gets TemplateChatML; any other is an error naming the file to write.
// The tokenizer is ChatML.Tokenizer().
func LoadDir(dir string) (*ChatML, error) {
	tok, err := tokenizer.LoadDir(dir)
	if err != nil {
		return nil, err
	}
	cfg, ok, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	if !ok {
		_, hasStart := tok.TokenID(TokIMStart)
		_, hasEnd := tok.TokenID(TokIMEnd)
		if !hasStart || !hasEnd {
			return nil, fmt.Errorf("chat: %s: no %s and the tokenizer has no ChatML tokens; only ChatML templates are implemented", dir, ConfigFileName)
		}
		cfg = Config{Template: TemplateChatML}
	}
	t, err := New(tok, cfg)
	if err != nil {
		return nil, fmt.Errorf("chat: %s: %w", dir, err)
	}
	return t, nil
}

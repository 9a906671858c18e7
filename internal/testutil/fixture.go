package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/aglrl/agl/chat"
)

// Tokenizer is testdata/tokenizer/NAME at the repository root (the golden
// tokenizer fixtures, qwen3 and llama3, with their licenses), or an error
// saying it is missing.
func Tokenizer(name string) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	p := filepath.Join(root, "testdata", "tokenizer", name)
	if _, err := os.Stat(filepath.Join(p, "tokenizer.json")); err != nil {
		return "", fmt.Errorf("testutil: tokenizer fixture %q: %w", name, err)
	}
	return p, nil
}

// TokenizerDir is [Tokenizer] for a test: a missing fixture fails it.
func TokenizerDir(t testing.TB, name string) string {
	t.Helper()
	p, err := Tokenizer(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ChatML loads testdata/tokenizer/NAME as a ChatML chat format (a
// template with tool calls, which the real coding CLIs need).
func ChatML(t testing.TB, name string) *chat.ChatML {
	t.Helper()
	p := TokenizerDir(t, name)
	f, err := chat.LoadDir(p)
	if err != nil {
		t.Fatal(err)
	}
	ml, ok := f.(*chat.ChatML)
	if !ok {
		t.Fatalf("%s is %T, want ChatML", p, f)
	}
	return ml
}

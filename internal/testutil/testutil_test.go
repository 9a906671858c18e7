package testutil_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/engine"
	"github.com/aglrl/agl/internal/testutil"
)

// TestScriptEngine: replies come in script order, as ReplyIDs or (Rendered)
// as RenderMasked trains them, cut at MaxTokens; every call is recorded;
// an exhausted script is an error.
func TestScriptEngine(t *testing.T) {
	t.Parallel()
	qwen := testutil.ChatML(t, "qwen3")
	small, err := chat.NewSmall()
	if err != nil {
		t.Fatal(err)
	}
	hi := chat.Message{Role: chat.RoleAssistant, Content: "hello"}
	tests := []struct {
		name      string
		tmpl      *chat.ChatML
		rendered  bool
		maxTokens int
		want      string
		finish    string
	}{
		{"reply ids", qwen, false, 0, "hello<|im_end|>", engine.FinishStop},
		{"rendered: qwen3's empty think block", qwen, true, 0, "<think>\n\n</think>\n\nhello<|im_end|>", engine.FinishStop},
		{"rendered small template", small, true, 0, "hello<|im_end|>", engine.FinishStop},
		{"cut at max tokens", small, false, 2, "he", engine.FinishLength},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := &testutil.ScriptEngine{Tmpl: tc.tmpl, ModelVersion: 4, Rendered: tc.rendered}
			e.Push(hi, hi)
			prompt := []int32{1, 2, 3}
			r, err := e.Generate(context.Background(), prompt, engine.Sampling{MaxTokens: tc.maxTokens})
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.tmpl.Tokenizer().Decode(r.IDs); got != tc.want || r.FinishReason != tc.finish {
				t.Errorf("reply %q %s, want %q %s", got, r.FinishReason, tc.want, tc.finish)
			}
			if len(r.Logprobs) != len(r.IDs) || r.Model != "agl-test" || r.ModelVersion != 4 || e.Version() != 4 {
				t.Errorf("result %+v: want a logprob per id, model agl-test v4", r)
			}
			prompts, outputs := e.Calls()
			if len(prompts) != 1 || !slices.Equal(prompts[0], prompt) || !slices.Equal(outputs[0], r.IDs) {
				t.Errorf("recorded %v → %v, want %v → %v", prompts, outputs, prompt, r.IDs)
			}
			if e.Left() != 1 {
				t.Errorf("%d replies left, want 1", e.Left())
			}
			e.Script()
			if p, _ := e.Calls(); len(p) != 0 || e.Left() != 0 {
				t.Errorf("after Script(): %d calls, %d replies left", len(p), e.Left())
			}
			if _, err := e.Generate(context.Background(), prompt, engine.Sampling{}); err == nil || !strings.Contains(err.Error(), "no reply scripted") {
				t.Errorf("exhausted script: %v", err)
			}
		})
	}
}

// TestGate: with Gate and Started set, Generate announces itself and waits
// for the gate or the context.
func TestGate(t *testing.T) {
	t.Parallel()
	small, err := chat.NewSmall()
	if err != nil {
		t.Fatal(err)
	}
	e := &testutil.ScriptEngine{Tmpl: small, Gate: make(chan struct{}), Started: make(chan struct{}, 1)}
	e.Push(chat.Message{Role: chat.RoleAssistant, Content: "ok"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := e.Generate(ctx, nil, engine.Sampling{}); done <- err }()
	<-e.Started
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("cancelled while gated: %v, want context.Canceled", err)
	}
	go func() { _, err := e.Generate(context.Background(), nil, engine.Sampling{}); done <- err }()
	<-e.Started
	e.Gate <- struct{}{}
	if err := <-done; err != nil {
		t.Fatalf("gate opened: %v", err)
	}
}

// TestTokenizerFixtures: both golden tokenizers are in testdata/ with
// their licenses; an unknown name is an error naming it.
func TestTokenizerFixtures(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"qwen3", "llama3"} {
		p := testutil.TokenizerDir(t, name)
		for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "LICENSE"} {
			if _, err := os.Stat(filepath.Join(p, f)); err != nil {
				t.Error(err)
			}
		}
	}
	if _, err := testutil.Tokenizer("nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown fixture: %v", err)
	}
}

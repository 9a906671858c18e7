package testutil

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/engine"
)

// ScriptEngine is a deterministic token engine standing in for the model:
// each Generate answers with the next scripted assistant message, rendered
// to ids by the real template, and records the prompt it was given and the
// ids it answered. Results report model "agl-test" at ModelVersion.
type ScriptEngine struct {
	Tmpl         *chat.ChatML
	ModelVersion int64
	// Rendered makes a reply the ids RenderMasked trains on after a user
	// turn (with Qwen3's full template, an empty think block first);
	// otherwise they are ReplyIDs (what the model generates after the
	// generation prompt).
	Rendered bool
	// Gate, when set, is received from before each Generate returns.
	Gate chan struct{}
	// Started, when set, is sent to as each Generate starts.
	Started chan struct{}
	// Context is what MaxContext reports (0: 1<<16).
	Context int

	mu      sync.Mutex
	replies []chat.Message
	prompts [][]int32
	outputs [][]int32
}

// Push appends replies to the script.
func (e *ScriptEngine) Push(ms ...chat.Message) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.replies = append(e.replies, ms...)
}

// Script replaces the script with ms and forgets the calls recorded.
func (e *ScriptEngine) Script(ms ...chat.Message) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.replies, e.prompts, e.outputs = slices.Clone(ms), nil, nil
}

// Left is how many scripted replies are not yet answered.
func (e *ScriptEngine) Left() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.replies)
}

// Calls are the prompts the engine was given and the ids it answered, one
// per Generate, in order.
func (e *ScriptEngine) Calls() (prompts, outputs [][]int32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.prompts), slices.Clone(e.outputs)
}

// Prompts are the prompts the engine was given, decoded.
func (e *ScriptEngine) Prompts() []string {
	prompts, _ := e.Calls()
	out := make([]string, len(prompts))
	for i, p := range prompts {
		out[i] = e.Tmpl.Tokenizer().Decode(p)
	}
	return out
}

func (e *ScriptEngine) reply(m chat.Message) ([]int32, error) {
	if !e.Rendered {
		return e.Tmpl.ReplyIDs(m), nil
	}
	ids, mask, err := e.Tmpl.RenderMasked(chat.Conversation{Messages: []chat.Message{{Role: chat.RoleUser, Content: "x"}, m}})
	if err != nil {
		return nil, err
	}
	var out []int32
	for i, id := range ids {
		if mask[i] {
			out = append(out, id)
		}
	}
	return out, nil
}

// Generate implements [engine.TokenEngine]. A reply longer than s.MaxTokens is
// cut there and finishes with FinishLength.
func (e *ScriptEngine) Generate(ctx context.Context, prompt []int32, s engine.Sampling) (engine.Result, error) {
	if e.Started != nil {
		e.Started <- struct{}{}
	}
	if e.Gate != nil {
		select {
		case <-e.Gate:
		case <-ctx.Done():
			return engine.Result{}, ctx.Err()
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.replies) == 0 {
		return engine.Result{}, errors.New("script engine: no reply scripted")
	}
	m := e.replies[0]
	e.replies = e.replies[1:]
	ids, err := e.reply(m)
	if err != nil {
		return engine.Result{}, err
	}
	finish := engine.FinishStop
	if s.MaxTokens > 0 && len(ids) > s.MaxTokens {
		ids, finish = ids[:s.MaxTokens], engine.FinishLength
	}
	lps := make([]float32, len(ids))
	for i := range lps {
		lps[i] = -float32(i%7+1) / 8
	}
	e.prompts = append(e.prompts, slices.Clone(prompt))
	e.outputs = append(e.outputs, slices.Clone(ids))
	return engine.Result{IDs: ids, Logprobs: lps, FinishReason: finish, Model: "agl-test", ModelVersion: e.ModelVersion}, nil
}

// ModelName implements [engine.TokenEngine].
func (e *ScriptEngine) ModelName() string { return "agl-test" }

// Version implements [engine.TokenEngine].
func (e *ScriptEngine) Version() int64 { return e.ModelVersion }

// MaxContext implements [engine.TokenEngine].
func (e *ScriptEngine) MaxContext() int {
	if e.Context > 0 {
		return e.Context
	}
	return 1 << 16
}

var _ engine.TokenEngine = (*ScriptEngine)(nil)

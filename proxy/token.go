package proxy

import (
	"bytes"
	"container/list"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/engine"
	"github.com/aglrl/agl/engine/upstream"
)

// Codec turns text into token ids and back (tokenizer.Tokenizer is one);
// the /v1/completions route of a TokenBackend needs it for text prompts
// (chat routes only need the template).
type Codec interface {
	Encode(text string) []int32
	Decode(ids []int32) string
}

// Render reasons recorded in model_request events.
const (
	ReasonFirstCall        = "first_call"
	ReasonNoTokenState     = "no_token_state"
	ReasonHistoryRewritten = "history_rewritten"
	ReasonToolsChanged     = "tools_changed"
	ReasonRawPrompt        = "raw_prompt"
	ReasonUpstream         = "upstream_rendered"
)

// TokenBackend serves calls from a token-in-token-out engine: it renders
// conversations with the chat template, generates, and parses the reply.
//
// It keeps per-attempt token state: when a call's conversation extends an
// earlier call's conversation plus that call's reply, the prompt is the
// earlier prompt ids + the ids the engine generated + the rendered new
// messages, never a re-tokenization of earlier text. The state lives in
// memory (bounded, least recently used attempts dropped); when a
// conversation holds a generated reply the memory does not cover (another
// gateway replica served that call, or this process before a restart),
// the state is continued from the store's record of the call (StateSource),
// else the prompt is rendered from scratch and the event says why.
type TokenBackend struct {
	engine   engine.TokenEngine
	template chat.Template
	codec    Codec
	source   StateSource // nil: memory only

	maxAttempts int
	tag         string // random per backend: tool call ids stay unique across restarts
	ids         atomic.Uint64

	mu     sync.Mutex               // guards the fields below
	states map[string]*list.Element // attempt key → element of lru (*attemptState)
	lru    list.List
	// maxIDs bounds the token ids held over all attempts; totalIDs counts them.
	maxIDs, totalIDs int
}

// statesPerAttempt bounds the branches remembered per attempt (a harness
// may run several conversations, e.g. sub-agents, in one attempt).
const statesPerAttempt = 16

type attemptState struct {
	key      string
	ids      int       // token ids held by branches
	branches []*branch // most recent first
}

// branch is one conversation as generated so far: the messages (ending
// with the generated reply) and the ids prompt+generated.
type branch struct {
	msgs  []chat.Message
	tools []chat.Tool
	ids   []int32
}

// NewTokenBackend returns a backend over e and template t. codec may be nil
// (then /v1/completions accepts only token-id prompts and returns no text).
// maxAttempts bounds the attempts whose token state is kept (default 4096);
// the state also holds at most DefaultMaxStateIDs token ids in all (see
// SetMaxStateIDs), least recently used attempts being forgotten first.
func NewTokenBackend(e engine.TokenEngine, t chat.Template, codec Codec, maxAttempts int) *TokenBackend {
	if maxAttempts <= 0 {
		maxAttempts = 4096
	}
	return &TokenBackend{engine: e, template: t, codec: codec, maxAttempts: maxAttempts, maxIDs: DefaultMaxStateIDs, tag: randSuffix(), states: map[string]*list.Element{}}
}

// DefaultMaxStateIDs bounds the token state's memory (4 bytes per id).
const DefaultMaxStateIDs = 64 << 20

// SetMaxStateIDs changes the bound on token ids kept in the token state.
func (b *TokenBackend) SetMaxStateIDs(n int) {
	b.mu.Lock()
	b.maxIDs = n
	b.mu.Unlock()
}

// useStateSource sets the StateSource consulted on a token-state miss
// unless one was set already (proxy.New gives its store's).
func (b *TokenBackend) useStateSource(s StateSource) {
	b.mu.Lock()
	if b.source == nil {
		b.source = s
	}
	b.mu.Unlock()
}

// storedCallsTried is how many of an attempt's latest stored calls a miss
// compares the conversation with.
const storedCallsTried = statesPerAttempt

// ModelName implements Backend.
func (b *TokenBackend) ModelName() string { return b.engine.ModelName() }

// Forget drops the token state of one agent of an attempt (t.Agent; ""
// for the default agent), e.g. when it ends.
func (b *TokenBackend) Forget(t Target) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if el, ok := b.states[t.key()]; ok {
		b.totalIDs -= b.lru.Remove(el).(*attemptState).ids
		delete(b.states, t.key())
	}
}

// prompt computes the prompt ids for conv, continuing token state if it can.
func (b *TokenBackend) prompt(ctx context.Context, t Target, conv chat.Conversation) (ids []int32, continued bool, reason string, err error) {
	key := t.key()
	var prev *branch
	reason = ReasonFirstCall
	for _, m := range conv.Messages {
		if m.Role == chat.RoleAssistant {
			reason = ReasonNoTokenState
			break
		}
	}
	b.mu.Lock()
	if el, ok := b.states[key]; ok {
		b.lru.MoveToFront(el)
		st := el.Value.(*attemptState)
		best, toolsChanged := -1, false
		for _, br := range st.branches {
			n := len(br.msgs)
			if n >= len(conv.Messages) || n <= best {
				continue
			}
			if !messagesExtend(conv.Messages[:n], br.msgs) {
				continue
			}
			if !toolsEqual(conv.Tools, br.tools) {
				toolsChanged = true
				continue
			}
			prev, best = br, n
		}
		if prev == nil && len(st.branches) > 0 {
			reason = ReasonHistoryRewritten
			if toolsChanged {
				reason = ReasonToolsChanged
			}
		}
	}
	source := b.source
	b.mu.Unlock()
	if source != nil && replyAfter(conv.Messages, prev) {
		if br := b.storedBranch(ctx, source, t, conv, prev); br != nil {
			prev = br
			b.remember(key, br)
		}
	}
	if prev != nil {
		suffix, err := b.template.RenderSuffix(conv, len(prev.msgs))
		if err != nil {
			return nil, false, "", fmt.Errorf("%w: render: %v", ErrBadRequest, err)
		}
		ids = make([]int32, 0, len(prev.ids)+len(suffix))
		ids = append(append(ids, prev.ids...), suffix...)
		return ids, true, "", nil
	}
	ids, err = b.template.Render(conv, true)
	if err != nil {
		return nil, false, "", fmt.Errorf("%w: render: %v", ErrBadRequest, err)
	}
	return ids, false, reason, nil
}

// replyAfter reports whether msgs hold an assistant message after those
// of prev (all of them when prev is nil): a reply this process's token
// state does not cover.
func replyAfter(msgs []chat.Message, prev *branch) bool {
	from := 0
	if prev != nil {
		from = len(prev.msgs)
	}
	for _, m := range msgs[from:] {
		if m.Role == chat.RoleAssistant {
			return true
		}
	}
	return false
}

// storedBranch returns the branch of the longest stored call of t that
// conv extends (as the memory's branches are matched) and that covers
// more than prev, or nil. A store error only loses the continuation.
func (b *TokenBackend) storedBranch(ctx context.Context, source StateSource, t Target, conv chat.Conversation, prev *branch) *branch {
	calls, err := source.RecentCalls(ctx, t, storedCallsTried)
	if err != nil {
		return nil
	}
	best := 0
	if prev != nil {
		best = len(prev.msgs)
	}
	var out *branch
	for _, sc := range calls {
		n := len(sc.Conv.Messages) + 1 // and the reply
		if n >= len(conv.Messages) || n <= best {
			continue
		}
		if !messagesExtend(conv.Messages[:n-1], sc.Conv.Messages) || !toolsEqual(conv.Tools, sc.Conv.Tools) {
			continue
		}
		msg, err := b.template.Parse(sc.ResponseIDs)
		if err != nil {
			continue
		}
		msg.Role = chat.RoleAssistant
		msgs := append(append(make([]chat.Message, 0, n), sc.Conv.Messages...), msg)
		if !messagesExtend(conv.Messages[n-1:n], msgs[n-1:]) {
			continue
		}
		ids := make([]int32, 0, len(sc.PromptIDs)+len(sc.ResponseIDs))
		ids = append(append(ids, sc.PromptIDs...), sc.ResponseIDs...)
		out, best = &branch{msgs: msgs, tools: sc.Conv.Tools, ids: ids}, n
	}
	return out
}

// remember records a generated branch for key.
func (b *TokenBackend) remember(key string, br *branch) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var st *attemptState
	if el, ok := b.states[key]; ok {
		b.lru.MoveToFront(el)
		st = el.Value.(*attemptState)
	} else {
		st = &attemptState{key: key}
		b.states[key] = b.lru.PushFront(st)
	}
	// A branch this one extends is superseded.
	kept := st.branches[:0:0]
	kept = append(kept, br)
	for _, o := range st.branches {
		if len(o.msgs) < len(br.msgs) && messagesExtend(br.msgs[:len(o.msgs)], o.msgs) {
			continue
		}
		if len(kept) < statesPerAttempt {
			kept = append(kept, o)
		}
	}
	st.branches = kept
	b.totalIDs -= st.ids
	st.ids = 0
	for _, o := range kept {
		st.ids += len(o.ids)
	}
	b.totalIDs += st.ids
	// Forget the least recently used attempts beyond the bounds.
	for b.lru.Len() > 1 && (b.lru.Len() > b.maxAttempts || b.totalIDs > b.maxIDs) {
		old := b.lru.Remove(b.lru.Back()).(*attemptState)
		delete(b.states, old.key)
		b.totalIDs -= old.ids
	}
}

func (b *TokenBackend) sampling(s engine.Sampling, promptLen int) (engine.Sampling, error) {
	stops := b.template.StopIDs()
	if len(s.StopIDs) == 0 {
		s.StopIDs = stops
	} else {
		s.StopIDs = append(append([]int32(nil), s.StopIDs...), stops...)
	}
	if max := b.engine.MaxContext(); max > 0 {
		room := max - promptLen
		if room <= 0 {
			return s, fmt.Errorf("%w: prompt of %d tokens exceeds the context of %d tokens", ErrBadRequest, promptLen, max)
		}
		if s.MaxTokens <= 0 || s.MaxTokens > room {
			s.MaxTokens = room
		}
	}
	return s, nil
}

// Chat implements Backend.
func (b *TokenBackend) Chat(ctx context.Context, req *ChatRequest) (*Result, error) {
	if len(req.Stop) > 0 {
		return nil, fmt.Errorf("%w: stop strings are not supported by the token engine", ErrUnsupported)
	}
	key := req.Target.key()
	prompt, continued, reason, err := b.prompt(ctx, req.Target, req.Conv)
	if err != nil {
		return nil, err
	}
	s, err := b.sampling(req.Sampling, len(prompt))
	if err != nil {
		return nil, err
	}
	res, err := b.engine.Generate(upstream.WithSticky(ctx, req.Target.RolloutID), prompt, s)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	msg, err := b.template.Parse(res.IDs)
	if err != nil {
		return nil, fmt.Errorf("parse reply: %w", err)
	}
	msg.Role = chat.RoleAssistant
	// Tool call ids are unique per call (the template's may repeat when a
	// reply repeats, which confuses harnesses keyed by id); templates do
	// not render them, so replacing them keeps the token state exact.
	prefix := req.ToolIDPrefix
	if prefix == "" {
		prefix = "call_"
	}
	for i := range msg.ToolCalls {
		msg.ToolCalls[i].ID = prefix + b.tag + strconv.FormatUint(b.ids.Add(1), 36)
	}
	if res.FinishReason == engine.FinishStop {
		msgs := make([]chat.Message, len(req.Conv.Messages)+1)
		copy(msgs, req.Conv.Messages)
		msgs[len(msgs)-1] = msg
		all := make([]int32, 0, len(prompt)+len(res.IDs))
		all = append(append(all, prompt...), res.IDs...)
		b.remember(key, &branch{msgs: msgs, tools: req.Conv.Tools, ids: all})
	}
	return &Result{
		Message: msg, PromptIDs: prompt, ResponseIDs: res.IDs, Logprobs: res.Logprobs,
		FinishReason: res.FinishReason, Model: res.Model, ModelVersion: res.ModelVersion,
		Continued: continued, RenderReason: reason, Sampling: &s, Retries: res.Retries,
		PromptTokens: len(prompt), CompletionTokens: len(res.IDs),
	}, nil
}

// CountTokens implements TokenCounter: the length of the conversation
// rendered from scratch with the generation prompt.
func (b *TokenBackend) CountTokens(ctx context.Context, conv chat.Conversation) (int, error) {
	ids, err := b.template.Render(conv, true)
	if err != nil {
		return 0, fmt.Errorf("%w: render: %v", ErrBadRequest, err)
	}
	return len(ids), nil
}

// Complete implements Backend.
func (b *TokenBackend) Complete(ctx context.Context, req *CompleteRequest) (*Result, error) {
	if len(req.Stop) > 0 {
		return nil, fmt.Errorf("%w: stop strings are not supported by the token engine", ErrUnsupported)
	}
	prompt := req.PromptIDs
	if !req.IDsGiven {
		if b.codec == nil {
			return nil, fmt.Errorf("%w: text prompts need a tokenizer; send token ids", ErrUnsupported)
		}
		prompt = b.codec.Encode(req.Prompt)
	}
	if len(prompt) == 0 {
		return nil, fmt.Errorf("%w: empty prompt", ErrBadRequest)
	}
	if req.IDsGiven {
		vocab := -1
		if v, ok := b.codec.(interface{ VocabSize() int }); ok {
			vocab = v.VocabSize()
		}
		for i, id := range prompt {
			if id < 0 {
				return nil, fmt.Errorf("%w: prompt[%d]: token id %d is negative", ErrBadRequest, i, id)
			}
			if vocab >= 0 && int(id) >= vocab {
				return nil, fmt.Errorf("%w: prompt[%d]: token id %d is outside the vocabulary (%d ids)", ErrBadRequest, i, id, vocab)
			}
		}
	}
	s, err := b.sampling(req.Sampling, len(prompt))
	if err != nil {
		return nil, err
	}
	res, err := b.engine.Generate(upstream.WithSticky(ctx, req.Target.RolloutID), prompt, s)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	var text string
	if b.codec != nil {
		out := res.IDs
		// The text leaves out a final stop id, as OpenAI-compatible servers do.
		if n := len(out); n > 0 && res.FinishReason == engine.FinishStop && slices.Contains(s.StopIDs, out[n-1]) {
			out = out[:n-1]
		}
		text = b.codec.Decode(out)
	}
	return &Result{
		Text: text, PromptIDs: prompt, ResponseIDs: res.IDs, Logprobs: res.Logprobs,
		FinishReason: res.FinishReason, Model: res.Model, ModelVersion: res.ModelVersion,
		RenderReason: ReasonRawPrompt, Sampling: &s, Retries: res.Retries, PromptTokens: len(prompt), CompletionTokens: len(res.IDs),
	}, nil
}

// messagesExtend reports whether got (as sent by a harness) is the same
// conversation as want (as generated). Assistant messages compare loosely:
// reasoning is ignored (harnesses often drop it), text is compared
// trimmed, tool call arguments as JSON values and tool call ids not at all
// (the template does not render them).
func messagesExtend(got, want []chat.Message) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		g, w := &got[i], &want[i]
		if g.Role != w.Role {
			return false
		}
		if g.Role != chat.RoleAssistant {
			if g.Content != w.Content || g.ToolCallID != w.ToolCallID {
				return false
			}
			continue
		}
		if trimSpace(g.Content) != trimSpace(w.Content) || len(g.ToolCalls) != len(w.ToolCalls) {
			return false
		}
		for j := range g.ToolCalls {
			if g.ToolCalls[j].Name != w.ToolCalls[j].Name || !jsonEqual(g.ToolCalls[j].Arguments, w.ToolCalls[j].Arguments) {
				return false
			}
		}
	}
	return true
}

func trimSpace(s string) string { return string(bytes.TrimSpace([]byte(s))) }

func toolsEqual(a, b []chat.Tool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Description != b[i].Description || !jsonEqual(string(a[i].Parameters), string(b[i].Parameters)) {
			return false
		}
	}
	return true
}

// jsonEqual compares two JSON texts as values (falling back to text).
func jsonEqual(a, b string) bool {
	if a == b {
		return true
	}
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xa, yb)
}

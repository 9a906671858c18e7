package proxy_test

// A fake vLLM OpenAI-compatible server for the token-mode tests: it
// follows vLLM's wire format (vllm/entrypoints/openai/protocol.py,
// CompletionRequest/CompletionResponse and ChatCompletionResponse with
// return_token_ids), renders chat requests with the Qwen3 template (which
// renders byte-identically to the model's own Jinja template, see
// chat.TestQwen3Golden and TestTokenModeDrift) and answers scripted
// assistant replies as the ids the model would generate.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aglrl/agl/chat"
)

type vllmCall struct {
	path   string
	model  string
	prompt []int32
	output []int32
	// tokenized counts the prompt tokens the server rendered/tokenized
	// itself (all of them in chat mode, none for token-id prompts).
	tokenized int
	// maxTokens is the request's max_tokens (0: none sent).
	maxTokens int
}

type vllmServer struct {
	t   testing.TB
	ml  *chat.ChatML
	srv *httptest.Server

	mu      sync.Mutex
	replies []chat.Message
	calls   []vllmCall
	// loop, when set, answers every call with replies[0] (benchmarks).
	loop bool
	// maxModelLen, when set, is vLLM's --max-model-len: a max_tokens that
	// does not fit beside the prompt is refused, as vLLM refuses it, and a
	// call without one answers in the room left.
	maxModelLen int
}

func newVLLMServer(t testing.TB, ml *chat.ChatML) *vllmServer {
	v := &vllmServer{t: t, ml: ml}
	v.srv = httptest.NewServer(http.HandlerFunc(v.serve))
	t.Cleanup(v.srv.Close)
	return v
}

func (v *vllmServer) url() string { return v.srv.URL + "/v1" }

func (v *vllmServer) push(ms ...chat.Message) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.replies = append(v.replies, ms...)
}

func (v *vllmServer) recorded() []vllmCall {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.calls)
}

// vllmError answers in vLLM's error shape.
func vllmError(w http.ResponseWriter, status int, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": fmt.Sprintf(format, args...), "type": "BadRequestError", "param": nil, "code": status}})
	w.Write(b)
}

type wireToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type vllmRequest struct {
	Model          string          `json:"model"`
	Prompt         json.RawMessage `json:"prompt"`
	MaxTokens      *int            `json:"max_tokens"`
	Logprobs       json.RawMessage `json:"logprobs"`
	ReturnTokenIDs bool            `json:"return_token_ids"`
	StopTokenIDs   []int32         `json:"stop_token_ids"`
	Stream         bool            `json:"stream"`
	Messages       []struct {
		Role       string         `json:"role"`
		Content    *string        `json:"content"`
		ToolCalls  []wireToolCall `json:"tool_calls"`
		ToolCallID string         `json:"tool_call_id"`
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
}

func (v *vllmServer) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		vllmError(w, 400, "read: %v", err)
		return
	}
	var req vllmRequest
	if err := json.Unmarshal(body, &req); err != nil {
		vllmError(w, 400, "malformed JSON: %v", err)
		return
	}
	if !req.ReturnTokenIDs || req.Stream {
		vllmError(w, 400, "the test server needs return_token_ids: true and stream: false")
		return
	}
	tok := v.ml.Tokenizer()
	call := vllmCall{path: r.URL.Path, model: req.Model}
	switch r.URL.Path {
	case "/v1/completions":
		if string(req.Logprobs) != "0" && string(req.Logprobs) != "1" {
			vllmError(w, 400, "completions: logprobs must be an integer, got %s", req.Logprobs)
			return
		}
		if req.MaxTokens == nil || *req.MaxTokens <= 0 {
			// vLLM's default for completions is 16 tokens.
			vllmError(w, 400, "completions: the test server wants max_tokens (vLLM would generate 16 tokens)")
			return
		}
		if json.Unmarshal(req.Prompt, &call.prompt) != nil {
			var s string
			if err := json.Unmarshal(req.Prompt, &s); err != nil {
				vllmError(w, 400, "prompt: want a string or a list of token ids: %s", req.Prompt)
				return
			}
			call.prompt = tok.Encode(s)
			call.tokenized = len(call.prompt)
		}
	case "/v1/chat/completions":
		if string(req.Logprobs) != "true" {
			vllmError(w, 400, "chat: logprobs must be true, got %s", req.Logprobs)
			return
		}
		var conv chat.Conversation
		for _, t := range req.Tools {
			conv.Tools = append(conv.Tools, chat.Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
		}
		for _, m := range req.Messages {
			cm := chat.Message{Role: m.Role, ToolCallID: m.ToolCallID}
			if m.Content != nil {
				cm.Content = *m.Content
			}
			for _, tc := range m.ToolCalls {
				cm.ToolCalls = append(cm.ToolCalls, chat.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
			}
			conv.Messages = append(conv.Messages, cm)
		}
		// vLLM renders the model's Jinja template and tokenizes the text.
		ids, err := v.ml.Render(conv, true)
		if err != nil {
			vllmError(w, 400, "render: %v", err)
			return
		}
		call.prompt, call.tokenized = ids, len(ids)
	default:
		vllmError(w, 404, "unknown route %s", r.URL.Path)
		return
	}
	limit := 0
	if req.MaxTokens != nil {
		limit = *req.MaxTokens
	}
	call.maxTokens = limit
	if v.maxModelLen > 0 {
		room := v.maxModelLen - len(call.prompt)
		if limit > room {
			vllmError(w, 400, "'max_tokens' or 'max_completion_tokens' is too large: %d. This model's maximum context length is %d tokens and your request has %d input tokens (%d > %d - %d).", limit, v.maxModelLen, len(call.prompt), limit, v.maxModelLen, len(call.prompt))
			return
		}
		if limit <= 0 {
			limit = room
		}
	}
	v.mu.Lock()
	if len(v.replies) == 0 {
		v.mu.Unlock()
		vllmError(w, 500, "no reply scripted")
		return
	}
	m := v.replies[0]
	if !v.loop {
		v.replies = v.replies[1:]
	}
	v.mu.Unlock()
	out := v.ml.ReplyIDs(m)
	finish := "stop"
	if limit > 0 && len(out) > limit {
		out, finish = out[:limit], "length"
	}
	call.output = out
	lps := make([]float32, len(out))
	toks := make([]string, len(out))
	for i, id := range out {
		lps[i] = -float32(i%5+1) / 64
		toks[i] = tok.Decode([]int32{id})
	}
	textIDs := out
	if finish == "stop" {
		textIDs = out[:len(out)-1] // special tokens are skipped in the text
	}
	usage := map[string]any{"prompt_tokens": len(call.prompt), "total_tokens": len(call.prompt) + len(out), "completion_tokens": len(out), "prompt_tokens_details": nil}
	var resp any
	if r.URL.Path == "/v1/completions" {
		offs := make([]int, len(out))
		resp = map[string]any{
			"id": "cmpl-test", "object": "text_completion", "created": time.Now().Unix(), "model": req.Model,
			"choices": []any{map[string]any{
				"index": 0, "text": tok.Decode(textIDs),
				"logprobs":      map[string]any{"text_offset": offs, "token_logprobs": lps, "tokens": toks, "top_logprobs": nil},
				"finish_reason": finish, "stop_reason": nil, "token_ids": out, "prompt_logprobs": nil, "prompt_token_ids": call.prompt,
			}},
			"service_tier": nil, "system_fingerprint": nil, "usage": usage, "kv_transfer_params": nil,
		}
	} else {
		// vLLM's hermes tool parser and qwen3 reasoning parser.
		pm, err := v.ml.Parse(out)
		if err != nil {
			vllmError(w, 500, "parse: %v", err)
			return
		}
		msg := map[string]any{"role": "assistant", "content": nil, "reasoning_content": nil, "tool_calls": []any{}}
		if pm.Content != "" {
			msg["content"] = pm.Content
		}
		if pm.Reasoning != "" {
			msg["reasoning_content"] = pm.Reasoning
		}
		var tcs []any
		for i, tc := range pm.ToolCalls {
			tcs = append(tcs, map[string]any{"id": fmt.Sprintf("chatcmpl-tool-%d", i), "type": "function", "function": map[string]any{"name": tc.Name, "arguments": tc.Arguments}})
		}
		if len(tcs) > 0 {
			msg["tool_calls"] = tcs
			if finish == "stop" {
				finish = "tool_calls"
			}
		}
		content := make([]any, len(out))
		for i := range out {
			content[i] = map[string]any{"token": toks[i], "logprob": lps[i], "bytes": []byte(toks[i]), "top_logprobs": []any{}}
		}
		resp = map[string]any{
			"id": "chatcmpl-test", "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "logprobs": map[string]any{"content": content},
				"finish_reason": finish, "stop_reason": nil, "token_ids": out}},
			"usage": usage, "prompt_logprobs": nil, "prompt_token_ids": call.prompt, "kv_transfer_params": nil,
		}
	}
	b, err := json.Marshal(resp)
	if err != nil {
		vllmError(w, 500, "encode: %v", err)
		return
	}
	v.mu.Lock()
	v.calls = append(v.calls, call)
	v.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// convFixture is testdata/tokenmode/conversation.json: the true
// conversation of the drift test (replies as the model generates them).
type convFixture struct {
	Tools    []chat.Tool    `json:"tools"`
	Messages []chat.Message `json:"messages"`
}

func loadConvFixture(t testing.TB) convFixture {
	t.Helper()
	b, err := os.ReadFile("testdata/tokenmode/conversation.json")
	if err != nil {
		t.Fatal(err)
	}
	var c convFixture
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// replies returns the fixture's assistant messages (what the fake engine
// generates, in order) and their indexes.
func (c convFixture) replies() (ms []chat.Message, at []int) {
	for i, m := range c.Messages {
		if m.Role == chat.RoleAssistant {
			ms, at = append(ms, m), append(at, i)
		}
	}
	return ms, at
}

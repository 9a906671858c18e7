package proxy_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/engine/upstream"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// fakeVLLM answers Chat Completions in vLLM's return_token_ids format
// (top-level prompt_token_ids, the choice's token_ids, logprobs.content).
type fakeVLLM struct {
	srv   *httptest.Server
	fail  atomic.Int32 // answer this many calls with 429/500 first
	calls atomic.Int32
	noIDs bool
	body  []byte
	last  atomic.Value // map[string]any of the last request
}

const vllmAnswer = `{"id":"chatcmpl-up","object":"chat.completion","created":1,"model":"Qwen/Qwen3-8B","prompt_token_ids":[151644,872,198,9707],` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"Hello there.","tool_calls":[]},` +
	`"logprobs":{"content":[{"token":"Hello","logprob":-0.25,"bytes":[72],"top_logprobs":[]},{"token":" there","logprob":-0.5,"bytes":[32],"top_logprobs":[]},{"token":".","logprob":-0.125,"bytes":[46],"top_logprobs":[]},{"token":"<|im_end|>","logprob":-0.0625,"bytes":[],"top_logprobs":[]}]},` +
	`"finish_reason":"stop","stop_reason":null,"token_ids":[9707,1052,13,151645]}],` +
	`"usage":{"prompt_tokens":4,"total_tokens":8,"completion_tokens":4}}`

func newFakeVLLM(t testing.TB, parse bool) *fakeVLLM {
	v := &fakeVLLM{body: []byte(vllmAnswer)}
	v.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := v.calls.Add(1)
		if parse {
			var req map[string]any
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			v.last.Store(req)
		} else {
			var buf [4096]byte
			for {
				if _, err := r.Body.Read(buf[:]); err != nil {
					break
				}
			}
		}
		if v.fail.Add(-1) >= 0 {
			st := http.StatusTooManyRequests
			if n%2 == 0 {
				st = http.StatusInternalServerError
			}
			http.Error(w, `{"error":{"message":"overloaded"}}`, st)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if v.noIDs {
			w.Write([]byte(`{"id":"x","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there."},"finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":3,"total_tokens":7}}`))
			return
		}
		w.Write(v.body)
	}))
	t.Cleanup(v.srv.Close)
	return v
}

func upstreamBackend(t testing.TB, url string) *proxy.UpstreamBackend {
	c, err := upstream.New(upstream.Config{Models: []upstream.Model{{Name: "Qwen/Qwen3-8B", Endpoints: []string{url + "/v1"}, Version: 12}}, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return proxy.NewUpstreamBackend(c)
}

// TestUpstreamVLLM proxies Chat Completions (plain and streamed to the
// client from a non-streaming upstream call) and Anthropic Messages to a
// vLLM-format upstream; ids and log-probs land in the event; 429/5xx are
// retried.
func TestUpstreamVLLM(t *testing.T) {
	v := newFakeVLLM(t, true)
	temp := float32(0.6)
	e := newEnv(t, proxy.Config{Train: proxy.ModeOverrides{Temperature: &temp, MaxTokens: 77}}, upstreamBackend(t, v.srv.URL))
	cl := e.claim(t, store.ModeTrain)
	client := openai.NewClient(option.WithBaseURL(base(e.srv, cl)+"/v1"), option.WithAPIKey(cl.Key), option.WithMaxRetries(0))
	ctx := testCtx(t)
	params := openai.ChatCompletionNewParams{Model: "gpt-4o", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi")}, Temperature: openai.Float(1.2)}

	v.fail.Store(2)
	resp, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content != "Hello there." || resp.Model != "Qwen/Qwen3-8B" {
		t.Fatalf("answer %s", resp.RawJSON())
	}
	req := v.last.Load().(map[string]any)
	if req["return_token_ids"] != true || req["logprobs"] != true || req["model"] != "Qwen/Qwen3-8B" || req["temperature"] != 0.6 || req["max_tokens"] != 77.0 {
		t.Fatalf("upstream request %v (want token ids, logprobs, train overrides)", req)
	}

	s := client.Chat.Completions.NewStreaming(ctx, params)
	acc := openai.ChatCompletionAccumulator{}
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Choices[0].Message.Content != "Hello there." {
		t.Fatalf("streamed %q", acc.Choices[0].Message.Content)
	}

	ac := anthropic.NewClient(aoption.WithBaseURL(base(e.srv, cl)), aoption.WithAPIKey(cl.Key), aoption.WithMaxRetries(0))
	m, err := ac.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude", MaxTokens: 10, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hi"))}})
	if err != nil {
		t.Fatal(err)
	}
	if m.Content[0].Text != "Hello there." {
		t.Fatalf("anthropic answer %s", m.RawJSON())
	}

	calls := e.calls(t, cl)
	if len(calls) != 3 {
		t.Fatalf("%d events", len(calls))
	}
	for i, c := range calls {
		if !slices.Equal(c.PromptIDs, []int32{151644, 872, 198, 9707}) || !slices.Equal(c.ResponseIDs, []int32{9707, 1052, 13, 151645}) ||
			!slices.Equal(c.ResponseLogprobs, []float32{-0.25, -0.5, -0.125, -0.0625}) {
			t.Errorf("call %d: ids/logprobs %v %v %v", i, c.PromptIDs, c.ResponseIDs, c.ResponseLogprobs)
		}
		if c.NoTokenIDs || c.ModelVersion != 12 || c.Model != "Qwen/Qwen3-8B" || c.RenderReason != proxy.ReasonUpstream || c.FinishReason != "stop" {
			t.Errorf("call %d: %+v", i, c)
		}
	}
	if calls[0].Retries != 2 || calls[1].Retries != 0 || !calls[1].Stream || calls[2].API != api.ShapeMessages {
		t.Errorf("retries %d/%d stream %v api %s", calls[0].Retries, calls[1].Retries, calls[1].Stream, calls[2].API)
	}
}

// TestUpstreamNoTokenIDs: a hosted API that returns no ids gives an event
// marked no_token_ids.
func TestUpstreamNoTokenIDs(t *testing.T) {
	v := newFakeVLLM(t, false)
	v.noIDs = true
	e := newEnv(t, proxy.Config{}, upstreamBackend(t, v.srv.URL))
	cl := e.claim(t, store.ModeVal)
	client := openai.NewClient(option.WithBaseURL(base(e.srv, cl)+"/v1"), option.WithAPIKey(cl.Key), option.WithMaxRetries(0))
	if _, err := client.Chat.Completions.New(testCtx(t), openai.ChatCompletionNewParams{Model: "gpt-4o", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi")}}); err != nil {
		t.Fatal(err)
	}
	calls := e.calls(t, cl)
	if len(calls) != 1 || !calls[0].NoTokenIDs || calls[0].PromptIDs != nil || calls[0].Usage.CompletionTokens != 3 {
		t.Fatalf("%+v", calls)
	}
}

// TestUpstreamErrors: an upstream that keeps failing gives the client a 502;
// one rejecting the request gives its 4xx.
func TestUpstreamErrors(t *testing.T) {
	v := newFakeVLLM(t, false)
	e := newEnv(t, proxy.Config{}, upstreamBackend(t, v.srv.URL))
	cl := e.claim(t, store.ModeTrain)
	client := openai.NewClient(option.WithBaseURL(base(e.srv, cl)+"/v1"), option.WithAPIKey(cl.Key), option.WithMaxRetries(0))
	v.fail.Store(100)
	_, err := client.Chat.Completions.New(testCtx(t), openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi")}})
	var ae *openai.Error
	if !asErr(err, &ae) || ae.StatusCode != http.StatusBadGateway {
		t.Fatalf("err %v", err)
	}
	if n := len(e.calls(t, cl)); n != 0 {
		t.Fatalf("%d events for a failed call", n)
	}
}

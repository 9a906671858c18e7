package upstream

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/engine"
)

// vllm is a fake vLLM server answering in its return_token_ids format.
type vllm struct {
	srv      *httptest.Server
	fail     atomic.Int32 // answer this many calls with failStatus first
	status   int
	noIDs    bool
	sleep    time.Duration
	calls    atomic.Int32
	lastBody atomic.Value
}

func newVLLM(t *testing.T) *vllm {
	v := &vllm{status: http.StatusTooManyRequests}
	v.srv = httptest.NewServer(http.HandlerFunc(v.serve))
	t.Cleanup(v.srv.Close)
	return v
}

func (v *vllm) serve(w http.ResponseWriter, r *http.Request) {
	v.calls.Add(1)
	var req map[string]any
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	v.lastBody.Store(req)
	if v.sleep > 0 {
		select {
		case <-time.After(v.sleep):
		case <-r.Context().Done():
			return
		}
	}
	if v.fail.Add(-1) >= 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(v.status)
		w.Write([]byte(`{"error":{"message":"busy","type":"x"}}`))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path == "/v1/completions" {
		w.Write([]byte(`{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"ok","logprobs":{"tokens":["o","k"],"token_logprobs":[-0.25,-0.5]},"finish_reason":"length","prompt_token_ids":[7,8],"token_ids":[111,107]}],"usage":{"prompt_tokens":2,"completion_tokens":2,"total_tokens":4}}`))
		return
	}
	if v.noIDs {
		w.Write([]byte(`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`))
		return
	}
	w.Write([]byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","prompt_logprobs":null,"prompt_token_ids":[1,2,3],` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":null,"reasoning_content":"think","tool_calls":[{"id":"chatcmpl-tool-1","type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}}]},` +
		`"logprobs":{"content":[{"token":"x","logprob":-0.5,"bytes":[120],"top_logprobs":[]},{"token":"y","logprob":-1.5,"bytes":[121],"top_logprobs":[]}]},` +
		`"finish_reason":"tool_calls","stop_reason":null,"token_ids":[120,121]}],` +
		`"usage":{"prompt_tokens":3,"total_tokens":5,"completion_tokens":2}}`))
}

func newClient(t *testing.T, eps ...string) *Client {
	c, err := New(Config{Models: []Model{{Name: "m", Endpoints: eps, Version: 7}}, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var conv = chat.Conversation{
	Messages: []chat.Message{
		{Role: chat.RoleUser, Content: "hi"},
		{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: "call_1", Name: "f", Arguments: `{"a":0}`}}},
		{Role: chat.RoleTool, Content: "r", ToolCallID: "call_1"},
	},
	Tools: []chat.Tool{{Name: "f", Parameters: json.RawMessage(`{"type":"object"}`)}},
}

func TestChatTokenIDs(t *testing.T) {
	v := newVLLM(t)
	c := newClient(t, v.srv.URL+"/v1")
	r, err := c.Chat(context.Background(), ChatRequest{Model: "unknown-goes-to-default", Sticky: "r1", Conv: conv, Sampling: engine.Sampling{Temperature: 0.7, MaxTokens: 9, StopIDs: []int32{5}}})
	if err != nil {
		t.Fatal(err)
	}
	if string(r.PromptIDsJSON) != "[1,2,3]" || !slices.Equal(r.IDs, []int32{120, 121}) || !slices.Equal(r.Logprobs, []float32{-0.5, -1.5}) {
		t.Fatalf("ids/logprobs not read: %+v", r)
	}
	if r.NoTokenIDs || r.Version != 7 || r.Model != "m" || r.FinishReason != engine.FinishStop || r.Retries != 0 {
		t.Fatalf("result %+v", r)
	}
	if len(r.Message.ToolCalls) != 1 || r.Message.ToolCalls[0].Arguments != `{"a": 1}` || r.Message.Reasoning != "think" {
		t.Fatalf("message %+v", r.Message)
	}
	req := v.lastBody.Load().(map[string]any)
	if req["return_token_ids"] != true || req["logprobs"] != true || req["model"] != "m" || req["max_tokens"] != 9.0 || req["stream"] != false {
		t.Fatalf("request %v", req)
	}
	msgs := req["messages"].([]any)
	if msgs[1].(map[string]any)["content"] != nil || msgs[2].(map[string]any)["tool_call_id"] != "call_1" {
		t.Fatalf("messages %v", msgs)
	}
	if ids := req["stop_token_ids"].([]any); len(ids) != 1 {
		t.Fatalf("stop_token_ids %v", req["stop_token_ids"])
	}
}

func TestNoTokenIDs(t *testing.T) {
	v := newVLLM(t)
	v.noIDs = true
	r, err := newClient(t, v.srv.URL+"/v1").Chat(context.Background(), ChatRequest{Conv: conv})
	if err != nil {
		t.Fatal(err)
	}
	if !r.NoTokenIDs || r.IDs != nil || r.Message.Content != "hi" || r.PromptTokens != 3 {
		t.Fatalf("%+v", r)
	}
}

func TestCompletionTokenIDs(t *testing.T) {
	v := newVLLM(t)
	r, err := newClient(t, v.srv.URL+"/v1").Completion(context.Background(), CompletionRequest{PromptIDs: []int32{7, 8}})
	if err != nil {
		t.Fatal(err)
	}
	if string(r.PromptIDsJSON) != "[7,8]" || !slices.Equal(r.IDs, []int32{111, 107}) || !slices.Equal(r.Logprobs, []float32{-0.25, -0.5}) || r.Text != "ok" || r.FinishReason != engine.FinishLength {
		t.Fatalf("%+v", r)
	}
	if p := v.lastBody.Load().(map[string]any)["prompt"].([]any); len(p) != 2 {
		t.Fatalf("prompt %v", p)
	}
}

func TestRetries(t *testing.T) {
	for _, status := range []int{408, 429, 500, 502, 503} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			v := newVLLM(t)
			v.status = status
			v.fail.Store(2)
			r, err := newClient(t, v.srv.URL+"/v1").Chat(context.Background(), ChatRequest{Conv: conv})
			if err != nil {
				t.Fatal(err)
			}
			if r.Retries != 2 || v.calls.Load() != 3 {
				t.Fatalf("retries %d, calls %d", r.Retries, v.calls.Load())
			}
		})
	}
	t.Run("gives up", func(t *testing.T) {
		v := newVLLM(t)
		v.status = 503
		v.fail.Store(100)
		_, err := newClient(t, v.srv.URL+"/v1").Chat(context.Background(), ChatRequest{Conv: conv})
		var he *HTTPError
		if !errors.As(err, &he) || he.Status != 503 || v.calls.Load() != 4 {
			t.Fatalf("err %v after %d calls", err, v.calls.Load())
		}
	})
	t.Run("400 not retried", func(t *testing.T) {
		v := newVLLM(t)
		v.status = 400
		v.fail.Store(1)
		_, err := newClient(t, v.srv.URL+"/v1").Chat(context.Background(), ChatRequest{Conv: conv})
		var he *HTTPError
		if !errors.As(err, &he) || he.Status != 400 || he.Message() != "busy" || v.calls.Load() != 1 {
			t.Fatalf("err %v after %d calls", err, v.calls.Load())
		}
	})
	t.Run("timeout retried", func(t *testing.T) {
		v := newVLLM(t)
		v.sleep = 300 * time.Millisecond
		c, err := New(Config{Models: []Model{{Name: "m", Endpoints: []string{v.srv.URL + "/v1"}}}, Timeout: 50 * time.Millisecond, MaxRetries: 1, Backoff: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Chat(context.Background(), ChatRequest{Conv: conv})
		if !errors.Is(err, context.DeadlineExceeded) || v.calls.Load() != 2 {
			t.Fatalf("err %v after %d calls", err, v.calls.Load())
		}
	})
}

// TestStickyEndpoints: a rollout's calls go to the endpoint Agent
// Lightning picks for it (SHA-256 of the rollout id over the sorted
// endpoints), the others following in sorted order; keys spread.
func TestStickyEndpoints(t *testing.T) {
	eps := []string{"http://a/v1", "http://b/v1", "http://c/v1", "http://d/v1"}
	c := newClient(t, eps[2], eps[0], eps[3], eps[1]+"/") // any order, trailing slash
	// Expected picks computed with Python's
	// int.from_bytes(hashlib.sha256(rid.encode()).digest()[:8], "big") % 4.
	for _, tc := range []struct {
		rollout string
		want    int
	}{{"ro-1", alIndex("ro-1", 4)}, {"rollout-abc", alIndex("rollout-abc", 4)}} {
		o := c.Endpoints("m", tc.rollout)
		want := make([]string, 4)
		for i := range want {
			want[i] = eps[(tc.want+i)%4]
		}
		if !slices.Equal(o, want) {
			t.Errorf("%s: order %v, want %v", tc.rollout, o, want)
		}
	}
	first := map[string]int{}
	for i := range 400 {
		key := "rollout-" + strconv.Itoa(i)
		o := c.Endpoints("m", key)
		if !slices.Equal(o, c.Endpoints("m", key)) {
			t.Fatal("order not stable for a key")
		}
		s := slices.Clone(o)
		slices.Sort(s)
		if !slices.Equal(s, eps) {
			t.Fatalf("order %v is not a permutation", o)
		}
		first[o[0]]++
	}
	for _, ep := range eps {
		if first[ep] < 50 {
			t.Errorf("endpoint %s first for only %d of 400 keys: %v", ep, first[ep], first)
		}
	}
}

// alIndex is agentlightning/server/proxy.py's select_server index.
func alIndex(rollout string, n int) int {
	d := sha256.Sum256([]byte(rollout))
	return int(binary.BigEndian.Uint64(d[:8]) % uint64(n))
}

// TestStickyIndexGolden pins the index to values computed by Python's
// hashlib (so that a rollout lands where Agent Lightning's gateway would
// send it).
func TestStickyIndexGolden(t *testing.T) {
	for _, tc := range []struct {
		rollout string
		n, want int
	}{
		// python3 -c 'import hashlib;print(int.from_bytes(hashlib.sha256(b"ro-1").digest()[:8],"big")%N)'
		{"ro-1", 4, 2}, {"ro-1", 3, 1}, {"rollout-abc", 7, 3},
	} {
		if got := stickyIndex(tc.rollout, tc.n); got != tc.want {
			t.Errorf("stickyIndex(%q, %d) = %d, want %d", tc.rollout, tc.n, got, tc.want)
		}
	}
}

func TestFailover(t *testing.T) {
	v := newVLLM(t)
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL + "/v1"
	dead.Close()
	c := newClient(t, deadURL, v.srv.URL+"/v1")
	// Find keys that prefer the dead endpoint.
	var keys []string
	for i := 0; len(keys) < 2; i++ {
		if k := strconv.Itoa(i); c.Endpoints("m", k)[0] == deadURL {
			keys = append(keys, k)
		}
	}
	start := time.Now()
	r, err := c.Chat(context.Background(), ChatRequest{Sticky: keys[0], Conv: conv})
	if err != nil {
		t.Fatal(err)
	}
	if r.Retries != 1 || v.calls.Load() != 1 {
		t.Fatalf("retries %d calls %d", r.Retries, v.calls.Load())
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("failover to a live endpoint took %v", d)
	}
	// The dead endpoint is now tried last by every call, for DeadFor.
	if o := c.Endpoints("m", keys[1]); o[0] == deadURL {
		t.Fatalf("dead endpoint still first: %v", o)
	}
	r, err = c.Chat(context.Background(), ChatRequest{Sticky: keys[1], Conv: conv})
	if err != nil || r.Retries != 0 {
		t.Fatalf("second call: retries %v err %v", r, err)
	}
}

// TestUpdate: the routing table changes while the client runs: version,
// endpoints added and removed (dead marks kept for those that stay), a new
// model, no endpoints at all.
func TestUpdate(t *testing.T) {
	a, b := newVLLM(t), newVLLM(t)
	c := newClient(t, a.srv.URL+"/v1")
	ctx := context.Background()
	if err := c.Update("m", 8, []string{a.srv.URL + "/v1", b.srv.URL + "/v1"}); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		r, err := c.Chat(ctx, ChatRequest{Sticky: "r" + strconv.Itoa(i), Conv: conv})
		if err != nil || r.Version != 8 {
			t.Fatalf("call %d: %+v %v", i, r, err)
		}
	}
	if a.calls.Load() == 0 || b.calls.Load() == 0 {
		t.Fatalf("calls a=%d b=%d: both endpoints should serve", a.calls.Load(), b.calls.Load())
	}
	// Remove a: no new calls reach it. A version-only update keeps b.
	if err := c.Update("m", 0, []string{b.srv.URL + "/v1"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Update("m", 9, nil); err != nil {
		t.Fatal(err)
	}
	na := a.calls.Load()
	for i := range 20 {
		r, err := c.Chat(ctx, ChatRequest{Sticky: "r" + strconv.Itoa(i), Conv: conv})
		if err != nil || r.Version != 9 {
			t.Fatalf("call %d: %+v %v", i, r, err)
		}
	}
	if a.calls.Load() != na {
		t.Fatalf("removed endpoint got %d new calls", a.calls.Load()-na)
	}
	// A new model, reachable by name; the default is unchanged.
	if err := c.Update("n", 2, []string{a.srv.URL + "/v1"}); err != nil {
		t.Fatal(err)
	}
	r, err := c.Chat(ctx, ChatRequest{Model: "n", Sticky: "x", Conv: conv})
	if err != nil || r.Model != "n" || r.Version != 2 || c.DefaultModel() != "m" {
		t.Fatalf("new model: %+v %v", r, err)
	}
	got := c.Models()
	if len(got) != 2 || got[0].Name != "m" || got[0].Version != 9 || !slices.Equal(got[0].Endpoints, []string{b.srv.URL + "/v1"}) {
		t.Fatalf("models %+v", got)
	}
	// No endpoints: a clear error, no call.
	if err := c.Update("m", 0, []string{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Chat(ctx, ChatRequest{Conv: conv}); !errors.Is(err, ErrNoEndpoints) {
		t.Fatalf("no endpoints: %v", err)
	}
	for _, bad := range [][]string{{""}, {"10.0.0.1:8000/v1"}} {
		if err := c.Update("m", 0, bad); err == nil {
			t.Errorf("endpoints %q accepted", bad)
		}
	}
	if err := c.Update("", 1, nil); err == nil {
		t.Error("empty model name accepted")
	}
}

// TestUpdateConcurrent runs calls while the table changes (for -race).
func TestUpdateConcurrent(t *testing.T) {
	a, b := newVLLM(t), newVLLM(t)
	c := newClient(t, a.srv.URL+"/v1")
	ctx := context.Background()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			eps := []string{a.srv.URL + "/v1"}
			if i%2 == 0 {
				eps = append(eps, b.srv.URL+"/v1")
			}
			if err := c.Update("m", int64(i+1), eps); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := range 50 {
		if _, err := c.Chat(ctx, ChatRequest{Sticky: strconv.Itoa(i), Conv: conv}); err != nil {
			t.Fatal(err)
		}
	}
	<-done
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{{}, {Models: []Model{{Name: "m", Endpoints: []string{"10.0.0.1:8000"}}}}, {Models: []Model{{Name: "m", Mode: "token"}}}, {Models: []Model{{Name: "m", TokenizerDir: "x"}}}, {Models: []Model{{Name: "m", Mode: "tokens", TokenizerDir: "x"}}}, {Models: []Model{{Endpoints: []string{"x"}}}}, {Models: []Model{{Name: "m", Endpoints: []string{"x"}}, {Name: "m", Endpoints: []string{"y"}}}}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}

func TestTokenEngine(t *testing.T) {
	v := newVLLM(t)
	e := NewTokenEngine(newClient(t, v.srv.URL+"/v1"), "", 4096)
	var _ engine.TokenEngine = e
	r, err := e.Generate(context.Background(), []int32{7, 8}, engine.Sampling{Temperature: 1, MaxTokens: 2, StopIDs: []int32{9}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.IDs, []int32{111, 107}) || !slices.Equal(r.Logprobs, []float32{-0.25, -0.5}) || r.FinishReason != engine.FinishLength || r.ModelVersion != 7 || r.Model != "m" {
		t.Fatalf("%+v", r)
	}
	req := v.lastBody.Load().(map[string]any)
	if req["return_token_ids"] != true || req["logprobs"] != 0.0 || req["max_tokens"] != 2.0 {
		t.Fatalf("request %v", req)
	}
	if e.ModelName() != "m" || e.Version() != 7 || e.MaxContext() != 4096 {
		t.Fatal("engine metadata")
	}
}

// Package replicas tests several `agl gateway` processes (the built
// binary) on one PostgreSQL, clients spread over them. It is its own
// package so that cmd/agl's tests stay as fast as they are; it skips
// without AGL_TEST_POSTGRES_URL (scripts/with-postgres.sh sets it).
package replicas

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/postgres/pgtest"
)

const adminKey = "replicas-key"

// build builds the agl binary into a temporary directory.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agl")
	out, err := exec.Command("go", "build", "-o", bin, "../../cmd/agl").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// upstream is a loopback vLLM-format server (token mode: /v1/completions
// with prompt ids) answering every call with a reply that has reasoning,
// which the harness drops when it sends the reply back: a re-render of
// the conversation would differ from the continued token state.
func upstream(t *testing.T, f chat.Format) (*httptest.Server, []int32) {
	ml := f.(*chat.ChatML)
	reply := ml.ReplyIDs(chat.Message{Role: chat.RoleAssistant, Reasoning: "think it over", Content: "Hello."})
	lps := strings.TrimSuffix(strings.Repeat("-0.5,", len(reply)), ",")
	ids, _ := json.Marshal(reply)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Prompt json.RawMessage `json:"prompt"`
		}
		body, _ := io.ReadAll(r.Body)
		json.Unmarshal(body, &req)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"cmpl-1","object":"text_completion","created":1,"model":"qwen","choices":[{"index":0,"text":"","logprobs":{"text_offset":[],"token_logprobs":[%s],"tokens":[],"top_logprobs":null},"finish_reason":"stop","stop_reason":null,"token_ids":%s,"prompt_logprobs":null,"prompt_token_ids":%s}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`, lps, ids, req.Prompt)
	}))
	t.Cleanup(srv.Close)
	return srv, reply
}

// syncBuffer collects a gateway's log.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type replica struct {
	url string
	log *syncBuffer
	cmd *exec.Cmd
}

// start runs one `agl gateway` on storeURL and waits until it answers.
func start(t *testing.T, bin, cfg, storeURL string) *replica {
	t.Helper()
	addr := testutil.FreeAddr(t)
	cmd := exec.Command(bin, "gateway", "--config", cfg, "--store", storeURL, "--data-dir", t.TempDir(), "--listen", addr)
	cmd.Env = append(os.Environ(), "AGL_ADMIN_KEY="+adminKey)
	r := &replica{url: "http://" + addr, log: &syncBuffer{}, cmd: cmd}
	cmd.Stdout, cmd.Stderr = r.log, r.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("gateway %s log:\n%s", r.url, r.log.String())
		}
	})
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(r.log.String(), "listening on"); {
		if time.Now().After(deadline) {
			t.Fatalf("gateway did not start:\n%s", r.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return r
}

// do sends a JSON request with key and returns the status and body.
func do(t *testing.T, ctx context.Context, method, url, key string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// TestReplicas: three gateways on one PostgreSQL, clients spread
// round-robin over them. Rollouts are created on one and claimed on
// another; an attempt's model calls land on each in turn and continue one
// token state (the prompt ids of a single-gateway run of the same
// conversation); rewards are posted on one, the attempt completed on
// another, and a long-poll on a third wakes at once although its poll
// fallback is an hour; a stale attempt is reaped once over all three;
// pause and resume (agl's and Agent Lightning's) issued on one apply on
// all, and a drain through one waits for all.
func TestReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	storeURL := pgtest.URL(t)
	qdir := testutil.TokenizerDir(t, "qwen3")
	f, err := chat.LoadDir(qdir)
	if err != nil {
		t.Fatal(err)
	}
	up, reply := upstream(t, f)
	bin := build(t)
	cfg := filepath.Join(t.TempDir(), "agl.yaml")
	// wait_poll 1h: only a notification can wake a long-poll in time.
	yml := "gateway:\n  reap_interval: 100ms\n  wait_poll: 1h\nengine:\n  upstream:\n    registry_poll: 1h\n    models:\n      - name: qwen\n        version: 1\n        endpoints: [\"" + up.URL + "/v1\"]\n        tokenizer_dir: " + qdir + "\n        max_context: 40960\n"
	if err := os.WriteFile(cfg, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	var gws []*replica
	for range 3 {
		gws = append(gws, start(t, bin, cfg, storeURL))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	next := 0
	rr := func() *replica { r := gws[next%len(gws)]; next++; return r }
	client := func(r *replica) *api.Client { return api.NewClient(r.url, adminKey) }

	// Rollouts created on one replica, claimed on the next.
	if _, err := client(rr()).CreateRollouts(ctx, []store.NewRollout{
		{ID: "spread", Config: store.RolloutConfig{UnresponsiveSeconds: 3600}},
		{ID: "single", Config: store.RolloutConfig{UnresponsiveSeconds: 3600}},
		{ID: "stale", Config: store.RolloutConfig{UnresponsiveSeconds: 1}},
	}); err != nil {
		t.Fatal(err)
	}
	claims := map[string]store.Claim{}
	for range 3 {
		cl, ok, err := client(rr()).Claim(ctx, store.ClaimRequest{WorkerID: "w"})
		if err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		claims[cl.Rollout.ID] = cl
	}

	// Calls of one conversation: on one replica ("single"), and spread
	// over the three ("spread").
	converse := func(cl store.Claim, on func() *replica) []api.ModelCall {
		msgs := []map[string]any{{"role": "user", "content": "hi"}}
		for range 4 {
			st, body := do(t, ctx, "POST", on().url+"/r/"+cl.Rollout.ID+"/"+cl.Attempt.ID+"/v1/chat/completions", cl.Key, map[string]any{"model": "qwen", "messages": msgs})
			var out struct {
				Choices []struct {
					Message map[string]any `json:"message"`
				} `json:"choices"`
			}
			if err := json.Unmarshal(body, &out); err != nil || st != 200 || len(out.Choices) != 1 {
				t.Fatalf("call: %d %s", st, body)
			}
			m := out.Choices[0].Message
			delete(m, "reasoning_content") // the harness drops the reasoning
			msgs = append(msgs, m, map[string]any{"role": "user", "content": "more"})
		}
		evs, err := client(rr()).ListEvents(ctx, store.EventFilter{RolloutID: cl.Rollout.ID, Types: []string{store.EventModelRequest}})
		if err != nil {
			t.Fatal(err)
		}
		calls := make([]api.ModelCall, len(evs))
		for i, e := range evs {
			if err := json.Unmarshal(e.Data, &calls[i]); err != nil {
				t.Fatal(err)
			}
		}
		return calls
	}
	single := converse(claims["single"], func() *replica { return gws[0] })
	spread := converse(claims["spread"], rr)
	if len(single) != 4 || len(spread) != 4 {
		t.Fatalf("%d and %d calls recorded, want 4", len(single), len(spread))
	}
	for i := range spread {
		if !slices.Equal(spread[i].PromptIDs, single[i].PromptIDs) {
			t.Errorf("call %d: prompt ids differ from the single-gateway run's", i)
		}
		if spread[i].Continued != (i > 0) {
			t.Errorf("call %d: continued=%v (%s), want %v", i, spread[i].Continued, spread[i].RenderReason, i > 0)
		}
	}
	// The reasoning the harness dropped is in the prompts (the generated
	// ids, as token state keeps them), which a re-render leaves out.
	if n := countSub(spread[3].PromptIDs, reply); n != 3 {
		t.Errorf("the last prompt holds the generated reply ids %d times, want 3 (every earlier reply, reasoning included)", n)
	}

	// Pause on one replica: the others' LLM routes refuse calls too (503
	// paused), within about a second; resume on another reopens them all.
	cl := claims["spread"]
	llmStatus := func(r *replica) int {
		st, _ := do(t, ctx, "POST", r.url+"/r/"+cl.Rollout.ID+"/"+cl.Attempt.ID+"/v1/chat/completions", cl.Key, map[string]any{"model": "qwen", "messages": []map[string]any{{"role": "user", "content": "x"}}})
		return st
	}
	// The agent route with the attempt's own key: agl's controller runs
	// this rollout, so the admin key's call would be another controller's
	// agent (409).
	alStatus := func(r *replica) int {
		st, _ := do(t, ctx, "POST", r.url+"/al/proxy/rollout/"+cl.Rollout.ID+"/attempt/0/mode/train/openai/v1/chat/completions", cl.Key, map[string]any{"messages": []map[string]any{{"role": "user", "content": "x"}}})
		return st
	}
	eventually := func(what string, r *replica, status func(*replica) int, want int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			got := status(r)
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s answers %d, want %d", what, r.url, got, want)
			}
		}
	}
	if st, body := do(t, ctx, "POST", gws[0].url+"/api/gateway/pause", adminKey, nil); st != 200 {
		t.Fatalf("pause: %d %s", st, body)
	}
	for _, r := range gws {
		eventually("after pause on replica 0", r, llmStatus, http.StatusServiceUnavailable)
	}
	// A drain through another replica waits for all three (nothing in
	// flight here), and each replica lists the three.
	if st, body := do(t, ctx, "POST", gws[2].url+"/api/gateway/drain?timeout=20s", adminKey, nil); st != 200 {
		t.Fatalf("drain: %d %s", st, body)
	}
	for _, r := range gws {
		st, err := client(r).Gateway(ctx)
		if err != nil || len(st.Replicas) != 3 || !st.Paused {
			t.Fatalf("%s status: %+v %v, want paused and 3 replicas", r.url, st, err)
		}
	}
	if st, body := do(t, ctx, "POST", gws[1].url+"/api/gateway/resume", adminKey, nil); st != 200 {
		t.Fatalf("resume: %d %s", st, body)
	}
	for _, r := range gws {
		eventually("after resume on replica 1", r, llmStatus, http.StatusOK)
	}
	// Agent Lightning's route: the model's servers registered through one
	// replica, AL's pause on another, seen by the third (429).
	if st, body := do(t, ctx, "POST", gws[2].url+"/api/models", adminKey, map[string]any{"name": "qwen", "version": 2, "endpoints": []string{up.URL + "/v1"}}); st != 200 {
		t.Fatalf("register: %d %s", st, body)
	}
	for _, r := range gws {
		eventually("AL route before pausing", r, alStatus, http.StatusOK)
	}
	if st, body := do(t, ctx, "POST", gws[0].url+"/al/proxy/pause", adminKey, map[string]any{"retry_after_seconds": 7}); st != 200 {
		t.Fatalf("AL pause: %d %s", st, body)
	}
	for _, r := range gws {
		eventually("after AL pause on replica 0", r, alStatus, http.StatusTooManyRequests)
	}
	if st, body := do(t, ctx, "POST", gws[1].url+"/al/proxy/resume", adminKey, nil); st != 200 {
		t.Fatalf("AL resume: %d %s", st, body)
	}
	for _, r := range gws {
		eventually("after AL resume on replica 1", r, alStatus, http.StatusOK)
	}

	// A long-poll on the third replica; rewards posted on the first, the
	// attempt completed on the second.
	c0, c1, c2 := client(gws[0]), client(gws[1]), client(gws[2])
	_, after, err := c2.Terminal(ctx, 0, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	type polled struct {
		rs  []store.Rollout
		at  time.Time
		err error
	}
	woke := make(chan polled, 1)
	go func() {
		for {
			rs, cur, err := c2.Terminal(ctx, after, 100, 50*time.Second)
			if err != nil || slices.ContainsFunc(rs, func(r store.Rollout) bool { return r.ID == "spread" }) {
				woke <- polled{rs, time.Now(), err}
				return
			}
			after = cur // the stale rollout may end first
		}
	}()
	time.Sleep(200 * time.Millisecond) // the long-poll is waiting
	if _, err := c0.AppendEvents(ctx, cl.Rollout.ID, cl.Attempt.ID, []store.NewEvent{{Type: store.EventReward, Data: json.RawMessage(`{"value":1}`)}}); err != nil {
		t.Fatal(err)
	}
	ended := time.Now()
	if _, err := c1.Complete(ctx, cl.Rollout.ID, cl.Attempt.ID, store.AttemptSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-woke:
		if p.err != nil {
			t.Fatal(p.err)
		}
		// The poll fallback is an hour and the wait 50s: only the
		// notification explains a return within seconds.
		d := p.at.Sub(ended)
		if d > 10*time.Second {
			t.Fatalf("the long-poll returned %v after the rollout ended", d)
		}
		t.Logf("the long-poll on replica 2 returned %v after the reward and completion on replicas 0 and 1", d)
	case <-time.After(40 * time.Second):
		t.Fatal("the long-poll on another replica did not wake when the rollout ended")
	}
	if ro, err := c2.GetRollout(ctx, "spread"); err != nil || ro.Reward == nil || *ro.Reward != 1 {
		t.Fatalf("rollout after completion: %+v %v", ro, err)
	}

	// The stale attempt (no heartbeat for 1s) is reaped once over the
	// three reapers.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ro, err := c0.GetRollout(ctx, "stale")
		if err != nil {
			t.Fatal(err)
		}
		if ro.Status == store.RolloutFailed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stale rollout still %s", ro.Status)
		}
	}
	time.Sleep(500 * time.Millisecond) // every reaper ran again since
	reaped := regexp.MustCompile(`msg=reaper unresponsive=(\d+)`)
	total := 0
	for _, r := range gws {
		for _, m := range reaped.FindAllStringSubmatch(r.log.String(), -1) {
			n, _ := strconv.Atoi(m[1])
			total += n
		}
	}
	if total != 1 {
		t.Fatalf("the replicas' reapers reported %d unresponsive attempts in all, want 1", total)
	}
}

// countSub counts the occurrences of sub in ids.
func countSub(ids, sub []int32) int {
	n := 0
	for i := 0; i+len(sub) <= len(ids); i++ {
		if slices.Equal(ids[i:i+len(sub)], sub) {
			n++
		}
	}
	return n
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/app"
	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/store"
)

// tokenUpstream is a loopback vLLM-format server answering both routes
// with the reply "Hello." (Qwen3 ids); it counts calls by route.
type tokenUpstream struct {
	srv   *httptest.Server
	mu    sync.Mutex
	paths []string
}

func newTokenUpstream(t *testing.T, f chat.Format) *tokenUpstream {
	ml := f.(*chat.ChatML)
	reply := ml.ReplyIDs(chat.Message{Role: chat.RoleAssistant, Content: "Hello."})
	lps := strings.TrimSuffix(strings.Repeat("-0.5,", len(reply)), ",")
	ids, _ := json.Marshal(reply)
	u := &tokenUpstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Prompt json.RawMessage `json:"prompt"`
		}
		body, _ := io.ReadAll(r.Body)
		json.Unmarshal(body, &req)
		u.mu.Lock()
		u.paths = append(u.paths, r.URL.Path)
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/completions" {
			fmt.Fprintf(w, `{"id":"cmpl-1","object":"text_completion","created":1,"model":"qwen","choices":[{"index":0,"text":"Hello.","logprobs":{"text_offset":[],"token_logprobs":[%s],"tokens":[],"top_logprobs":null},"finish_reason":"stop","stop_reason":null,"token_ids":%s,"prompt_logprobs":null,"prompt_token_ids":%s}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`, lps, ids, req.Prompt)
			return
		}
		fmt.Fprintf(w, `{"id":"c","object":"chat.completion","created":1,"model":"qwen","prompt_token_ids":[1,2],"choices":[{"index":0,"message":{"role":"assistant","content":"Hello."},"logprobs":{"content":[{"token":"x","logprob":-0.5}]},"finish_reason":"stop","token_ids":[9]}],"usage":{"prompt_tokens":2,"completion_tokens":1}}`)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *tokenUpstream) calls() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.paths...)
}

// TestUpstreamModeConfig: engine.upstream picks token mode for a model
// with tokenizer_dir (agl renders, /v1/completions with ids) and chat mode
// otherwise or when asked; bad combinations are refused naming the field.
func TestUpstreamModeConfig(t *testing.T) {
	qdir := testutil.TokenizerDir(t, "qwen3")
	tests := []struct {
		name, model, wantMode, wantErr string
	}{
		{"token by default with tokenizer_dir", "{name: qwen, endpoints: [EP], tokenizer_dir: QDIR, max_context: 40960}", "token", ""},
		{"chat asked", "{name: qwen, endpoints: [EP], tokenizer_dir: QDIR, mode: chat}", "chat", ""},
		{"chat without tokenizer_dir", "{name: qwen, endpoints: [EP]}", "chat", ""},
		{"token needs tokenizer_dir", "{name: qwen, endpoints: [EP], mode: token}", "", "needs tokenizer_dir"},
		{"token needs max_context", "{name: qwen, endpoints: [EP], tokenizer_dir: QDIR}", "", "needs max_context"},
		{"unknown mode", "{name: qwen, endpoints: [EP], mode: tokens, tokenizer_dir: QDIR}", "", `unknown mode "tokens"`},
		{"tokenizer_dir without a tokenizer", "{name: qwen, endpoints: [EP], tokenizer_dir: /nonexistent, max_context: 100}", "", "tokenizer_dir"},
		{"endpoint not a URL", "{name: qwen, endpoints: [\"10.0.0.1:8000/v1\"]}", "", "want an http:// or https:// base URL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			model := strings.NewReplacer("EP", "http://127.0.0.1:1/v1", "QDIR", qdir).Replace(tc.model)
			p := filepath.Join(dir, "agl.yaml")
			if err := os.WriteFile(p, []byte("data_dir: run\nengine:\n  upstream:\n    registry_poll: 50ms\n    models: ["+model+"]\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			c, err := app.Load(p)
			if err != nil {
				t.Fatal(err)
			}
			var logs strings.Builder
			l, err := app.OpenLLM(context.Background(), c, nil, slog.New(slog.NewTextHandler(&logs, nil)))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(logs.String(), "mode="+tc.wantMode) || l.Upstream == nil || l.ModelSync != 50*time.Millisecond || (l.Format != nil) != (tc.wantMode == "token") {
				t.Errorf("mode %s: format %v sync %v, log:\n%s", tc.wantMode, l.Format, l.ModelSync, logs.String())
			}
		})
	}
}

// TestGatewayTokenModeRegistry runs a real `agl gateway` in token mode in
// front of a vLLM-format upstream: calls go to /v1/completions with token
// ids, continuing the token state; POST /api/models with a new version
// and endpoint moves the next call there, and its event names the new
// version, without a restart.
func TestGatewayTokenModeRegistry(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	f, err := chat.LoadDir(testutil.TokenizerDir(t, "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	a, b := newTokenUpstream(t, f), newTokenUpstream(t, f)
	bin, err := buildAgl()
	if err != nil {
		t.Fatal(err)
	}
	dataDir, addr := t.TempDir(), testutil.FreeAddr(t)
	cfg := filepath.Join(dataDir, "agl.yaml")
	yml := "engine:\n  upstream:\n    models:\n      - name: qwen\n        version: 3\n        endpoints: [\"" + a.srv.URL + "/v1\"]\n        tokenizer_dir: " + testutil.TokenizerDir(t, "qwen3") + "\n        max_context: 40960\n"
	if err := os.WriteFile(cfg, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	gw := startGateway(t, bin, dataDir, addr, "--config", cfg)
	defer func() { gw.Process.Signal(syscall.SIGTERM); gw.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := api.NewClient("http://"+addr, "crash-key")
	if _, err := c.CreateRollouts(ctx, []store.NewRollout{{ID: "tm-1"}}); err != nil {
		t.Fatal(err)
	}
	cl, ok, err := c.Claim(ctx, store.ClaimRequest{WorkerID: "t"})
	if err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	msgs := []map[string]any{{"role": "user", "content": "hi"}}
	callOnce := func() {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"model": "qwen", "messages": msgs})
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+addr+"/r/"+cl.Rollout.ID+"/"+cl.Attempt.ID+"/v1/chat/completions", strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer "+cl.Key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Choices []struct {
				Message map[string]any `json:"message"`
			} `json:"choices"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || len(out.Choices) != 1 || out.Choices[0].Message["content"] != "Hello." {
			t.Fatalf("call: %d %v %+v", resp.StatusCode, err, out)
		}
		msgs = append(msgs, out.Choices[0].Message, map[string]any{"role": "user", "content": "more"})
	}
	callOnce()
	callOnce()
	if _, err := c.RegisterModel(ctx, store.Model{Name: "qwen", Version: 7, Endpoints: []string{b.srv.URL + "/v1"}}); err != nil {
		t.Fatal(err)
	}
	callOnce()
	if got := a.calls(); len(got) != 2 || got[0] != "/v1/completions" || got[1] != "/v1/completions" {
		t.Fatalf("first endpoint saw %v, want two /v1/completions calls", got)
	}
	if got := b.calls(); len(got) != 1 || got[0] != "/v1/completions" {
		t.Fatalf("registered endpoint saw %v, want the third call", got)
	}
	evs, err := c.ListEvents(ctx, store.EventFilter{RolloutID: cl.Rollout.ID, Types: []string{store.EventModelRequest}})
	if err != nil || len(evs) != 3 {
		t.Fatalf("%d events, %v", len(evs), err)
	}
	for k, want := range []int64{3, 3, 7} {
		var mc api.ModelCall
		if err := json.Unmarshal(evs[k].Data, &mc); err != nil {
			t.Fatal(err)
		}
		if mc.ModelVersion != want || mc.UpstreamRendered || (k > 0) != mc.Continued {
			t.Errorf("call %d: v%d upstream_rendered=%v continued=%v (%s), want v%d continued", k, mc.ModelVersion, mc.UpstreamRendered, mc.Continued, mc.RenderReason, want)
		}
	}
	// The gateway's /metrics counts the three calls (from their events).
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer crash-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `agl_model_calls_total{api="chat.completions",status="200"} 3`; !strings.Contains(string(body), want) {
		t.Errorf("/metrics has no %s:\n%s", want, grepLines(string(body), "agl_model_calls"))
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/aglrl/agl/app"
	"github.com/aglrl/agl/store"
)

// TestEngineMaxContext opens the embedded engine from an agl.yaml with and
// without engine.max_context: the context length comes from the config or
// the model's max_position_embeddings, and the start-up log names it; one
// the KV cache memory cannot hold is refused.
func TestEngineMaxContext(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var out bytes.Buffer
	if err := run(ctx, []string{"model", "init", "--preset", "tiny", "--out", filepath.Join(dir, "model")}, &out, &out); err != nil {
		t.Fatalf("model init: %v\n%s", err, out.String())
	}
	tests := []struct {
		name, engine string
		want         int
		log, wantErr string
	}{
		{"default", "{model_dir: MODEL}", 2048, "max_context=2048 from=max_position_embeddings", ""},
		{"explicit", "{model_dir: MODEL, max_context: 1000}", 1000, "max_context=1000 from=engine.max_context", ""},
		{"over memory", "{model_dir: MODEL, max_context: 2000000000}", 0, "", "max_context 2000000000 needs a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, "agl.yaml")
			if err := os.WriteFile(p, []byte(fmt.Sprintf("data_dir: run\nengine: %s\n", strings.ReplaceAll(tc.engine, "MODEL", filepath.Join(dir, "model")))), 0o644); err != nil {
				t.Fatal(err)
			}
			c, err := app.Load(p)
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			l, err := app.OpenLLM(ctx, c, nil, slog.New(slog.NewTextHandler(&logs, nil)))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer l.Engine.Close()
			if l.Engine.MaxContext() != tc.want || !strings.Contains(logs.String(), tc.log) || !strings.Contains(logs.String(), "kv_cache_mib=") {
				t.Errorf("max context %d, log:\n%s", l.Engine.MaxContext(), logs.String())
			}
		})
	}
}

// TestEngineOverLimitPromptAPIError sends prompts longer than
// engine.max_context through the gateway's proxy on the embedded model:
// each API answers 400 in its own error shape, naming both numbers.
func TestEngineOverLimitPromptAPIError(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var out bytes.Buffer
	if err := run(ctx, []string{"model", "init", "--preset", "tiny", "--out", filepath.Join(dir, "model")}, &out, &out); err != nil {
		t.Fatalf("model init: %v\n%s", err, out.String())
	}
	p := filepath.Join(dir, "agl.yaml")
	if err := os.WriteFile(p, []byte(fmt.Sprintf("data_dir: %s\nengine: {model_dir: %s, max_context: 64}\n", filepath.Join(dir, "run"), filepath.Join(dir, "model"))), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := app.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	st, err := app.OpenStore(ctx, c.Config, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l, err := app.OpenLLM(ctx, c, st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Engine.Close()
	srv := httptest.NewServer(l.Proxy)
	defer srv.Close()
	if _, err := st.CreateRollouts(ctx, []store.NewRollout{{Task: json.RawMessage(`{}`), Mode: store.ModeTrain}}); err != nil {
		t.Fatal(err)
	}
	cl, err := st.Claim(ctx, store.ClaimRequest{WorkerID: "t", Mode: store.ModeTrain})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("many words here ", 40)
	tests := []struct {
		name, route, body, errType string
	}{
		{"chat completions", "/v1/chat/completions", fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":%q}]}`, long), "invalid_request_error"},
		{"anthropic messages", "/v1/messages", fmt.Sprintf(`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":%q}]}`, long), "invalid_request_error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", srv.URL+"/r/"+cl.Rollout.ID+"/"+cl.Attempt.ID+tc.route, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer "+cl.Key)
			req.Header.Set("x-api-key", cl.Key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
			}
			b, _ := io.ReadAll(resp.Body)
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("%s: %v", b, err)
			}
			if resp.StatusCode != 400 || e.Error.Type != tc.errType || !regexp.MustCompile(`prompt of \d{3} tokens exceeds the context of 64 tokens`).MatchString(e.Error.Message) {
				t.Errorf("%d %s", resp.StatusCode, b)
			}
		})
	}
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aglrl/agl/config"
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
			c, err := config.Load(p)
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			l, err := openLLM(ctx, c, nil, slog.New(slog.NewTextHandler(&logs, nil)))
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

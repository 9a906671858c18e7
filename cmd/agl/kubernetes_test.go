package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestControllerKindErrors: `agl controller` (the built binary) refuses a
// bad kind or kubernetes section with a one-line error naming what was
// wrong, before claiming anything.
func TestControllerKindErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin, err := buildAgl()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, cmd, yaml, want string
	}{
		{"unknown kind", "controller", "controller:\n  kind: nomad\n  command: [true]\n", `controller: kind "nomad": want local or kubernetes`},
		{"kubernetes section with kind local", "controller", "controller:\n  command: [true]\n  kubernetes: {image: x}\n", `controller.kubernetes section but controller.kind is "local"`},
		{"unknown kubernetes field", "controller", "controller:\n  kind: kubernetes\n  kubernetes: {imagee: x}\n", "field imagee not found"},
		{"no image", "controller", "controller:\n  kind: kubernetes\n  kubernetes: {namespace: agl}\n", "controller.kubernetes: set image"},
		{"no cluster", "controller", "controller:\n  kind: kubernetes\n  kubernetes: {image: x, kubeconfig: /nonexistent/kubeconfig}\n", "controller.kubernetes: no cluster config from /nonexistent/kubeconfig"},
		{"bad template file", "controller", "controller:\n  kind: kubernetes\n  kubernetes: {job_template_file: missing.tmpl}\n", "controller.kubernetes: job_template_file: open "},
		{"train refuses kind kubernetes", "train", "engine: {model_dir: m}\ncontroller:\n  kind: kubernetes\n  kubernetes: {image: x}\n", "train: controller.kind kubernetes: agl train runs the local controller"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "agl.yaml")
			if err := os.WriteFile(cfg, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{tc.cmd, "--config", cfg}
			if tc.cmd == "train" {
				args = []string{"train", cfg}
			}
			_, stderr, err := aglRun(bin, args...)
			if err == nil || !strings.Contains(stderr, tc.want) {
				t.Fatalf("err %v, stderr %q, want %q", err, stderr, tc.want)
			}
		})
	}
}

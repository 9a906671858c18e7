package controller

import (
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestDoorAllows: the sandbox's gateway door passes only the attempt's
// own model routes, in canonical form.
func TestDoorAllows(t *testing.T) {
	prefix := "/r/R1/A1/"
	cases := []struct {
		raw  string
		want bool
	}{
		{"/r/R1/A1/v1/chat/completions", true},
		{"/r/R1/A1/v1/responses", true},
		{"/r/R1/A1/v1/messages?beta=true", true},
		{"/r/R1/A1/events", false},
		{"/r/R1/A1/events/", false},
		{"/r/R1/A1/v1/../events", false},
		{"/r/R1/A1/./events", false},
		{"/r/R1/A1//events", false},
		{"/r/R1/A1/v1%2F..%2Fevents", false},
		{"/r/R1/A2/v1/chat/completions", false},
		{"/r/R1/A1", false},
		{"/api/rollouts", false},
		{"/proxy/rollout/R1/attempt/A1/mode/train/openai/v1/chat/completions", false},
		{"/r/R1/A1/../A2/v1/chat/completions", false},
	}
	for _, c := range cases {
		u, err := url.ParseRequestURI(c.raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := doorAllows(prefix, u); got != c.want {
			t.Errorf("%s: allowed %v, want %v", c.raw, got, c.want)
		}
	}
}

// TestHarnessArgv: relative arguments naming files of dir become absolute
// (the harness runs in the workspace); programs in PATH, flags and other
// words stay.
func TestHarnessArgv(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"harness.py", "run.sh"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct{ in, want []string }{
		{[]string{"python3", "harness.py", "codex"}, []string{"python3", filepath.Join(dir, "harness.py"), "codex"}},
		{[]string{"./run.sh", "-v"}, []string{filepath.Join(dir, "run.sh"), "-v"}},
		{[]string{"sh", "/abs/x.sh", "missing.py"}, []string{"sh", "/abs/x.sh", "missing.py"}},
	}
	for _, c := range cases {
		if got := harnessArgv(c.in, dir); !slices.Equal(got, c.want) {
			t.Errorf("%v: %v, want %v", c.in, got, c.want)
		}
	}
}

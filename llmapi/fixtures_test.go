package llmapi

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// cliCall is a call a CLI made, captured in proxy/testdata.
type cliCall struct {
	name string
	// path is the request's path, query left out.
	path string
	body json.RawMessage
}

// cliCalls reads the captured calls whose file names match pattern.
func cliCalls(t testing.TB, pattern string) []cliCall {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "proxy", "testdata", pattern))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures %s: %v", pattern, err)
	}
	var out []cliCall
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var fx struct {
			Path string          `json:"path"`
			Body json.RawMessage `json:"body"`
		}
		if err := json.Unmarshal(b, &fx); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		path, _, _ := strings.Cut(fx.Path, "?")
		out = append(out, cliCall{name: filepath.Base(f), path: path, body: fx.Body})
	}
	return out
}

// fixtureBodies are the request bodies of the captured calls whose path
// ends in route.
func fixtureBodies(t testing.TB, route string) [][]byte {
	t.Helper()
	var out [][]byte
	for _, c := range cliCalls(t, "*-turn[12].json") {
		if strings.HasSuffix(c.path, route) {
			out = append(out, c.body)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no fixture calls %s", route)
	}
	return out
}

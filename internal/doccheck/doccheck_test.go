package doccheck

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestDocLinks fails on a relative link in README.md or docs/ whose file
// does not exist.
func TestDocLinks(t *testing.T) {
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	files, err := Markdown(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("found %d markdown files (%v): docs/ is missing", len(files), files)
	}
	broken, err := BrokenLinks(root, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range broken {
		t.Errorf("broken link %s", b)
	}
}

func TestBrokenLinks(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "docs", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(rel, text string) {
		if err := os.WriteFile(filepath.Join(root, rel), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/sub/a.md", "# A\n")
	write("README.md", strings.Join([]string{
		"[ok](docs/sub/a.md) [anchor](docs/sub/a.md#x) [dir](docs/sub)",
		"[web](https://example.com/x) [self](#top)",
		"[gone](docs/nope.md)",
		"`[code](docs/nope2.md)`",
		"```",
		"[fenced](docs/nope3.md)",
		"```",
		"![img](docs/missing.png)",
	}, "\n"))
	write("docs/sub/b.md", "[up](../../README.md) [wrong](a.md/x) [bad](../a.md)\n")
	files, err := Markdown(root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := BrokenLinks(root, files)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"README.md:3: docs/nope.md", "README.md:8: docs/missing.png", "docs/sub/b.md:1: a.md/x", "docs/sub/b.md:1: ../a.md"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("broken links:\n got %q\nwant %q", got, want)
	}
}

func TestKeys(t *testing.T) {
	type inner struct {
		A int `yaml:"a"`
	}
	type emb struct {
		E string `yaml:"e"`
	}
	type cfg struct {
		emb     `yaml:",inline"`
		Plain   string            `yaml:"plain,omitempty"`
		Skip    int               `yaml:"-"`
		Sub     *inner            `yaml:"sub"`
		List    []inner           `yaml:"list"`
		Names   map[string]inner  `yaml:"names"`
		Tags    map[string]string `yaml:"tags"`
		Strs    []string          `yaml:"strs"`
		Node    yaml.Node         `yaml:"node"`
		Rest    map[string]any    `yaml:",inline"`
		private int
	}
	got, err := Keys("x", reflect.TypeFor[cfg](), map[string]reflect.Type{"x.node": reflect.TypeFor[inner]()})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"x.e", "x.list[].a", "x.names.<name>.a", "x.node.a", "x.plain", "x.strs", "x.sub.a", "x.tags"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("keys:\n got %q\nwant %q", got, want)
	}
	if _, err := Keys("x", reflect.TypeFor[cfg](), nil); err == nil || !strings.Contains(err.Error(), "x.node") {
		t.Errorf("an unnamed yaml.Node: got %v, want an error naming x.node", err)
	}
	type loop struct {
		Next *loop `yaml:"next"`
	}
	if _, err := Keys("", reflect.TypeFor[loop](), nil); err == nil {
		t.Error("a type that contains itself: no error")
	}
}

func TestCompare(t *testing.T) {
	doc := map[string]int{"a.x": 3, "a.gone": 4, "b.other": 5}
	got := Compare([]string{"a.x", "a.new"}, doc, func(k string) bool { return strings.HasPrefix(k, "a.") })
	want := []string{
		"key a.gone (line 4) is in the doc's table but no config type decodes it",
		"key a.new is in the code but not in the doc's table",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("diffs:\n got %q\nwant %q", got, want)
	}
}

func TestDocKeysDuplicate(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.md")
	if err := os.WriteFile(p, []byte("| key | what |\n|---|---|\n| `a.b` | x |\n| `a.b` | y |\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := DocKeys(p); err == nil || !strings.Contains(err.Error(), "a.b") {
		t.Errorf("a key listed twice: got %v, want an error naming it", err)
	}
}

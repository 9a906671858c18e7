package layers

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/aglrl/agl/internal/testutil"
)

const module = "github.com/aglrl/agl/"

// imports reads the non-test Go files of the module under root: package
// directory (relative, slash-separated) → the module packages it imports.
func imports(t *testing.T, root string) map[string][]string {
	out := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		pkg := filepath.ToSlash(rel)
		if _, ok := out[pkg]; !ok {
			out[pkg] = nil
		}
		for _, im := range f.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			if dep, ok := strings.CutPrefix(path, module); ok && !slices.Contains(out[pkg], dep) {
				out[pkg] = append(out[pkg], dep)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// layerOf is the layer of pkg in ls, -1 when none names it.
func layerOf(ls [][]string, pkg string) int {
	for i, l := range ls {
		for _, p := range l {
			if p == pkg || strings.HasSuffix(p, "/") && strings.HasPrefix(pkg, p) {
				return i
			}
		}
	}
	return -1
}

// TestNoUpwardImports: every package of the module has a layer, and
// imports only packages of lower layers or those it is nested under.
func TestNoUpwardImports(t *testing.T) {
	root, err := testutil.Root()
	if err != nil {
		t.Fatal(err)
	}
	ls := Layers()
	byPkg := imports(t, root)
	if len(byPkg) < 30 {
		t.Fatalf("found %d packages under %s; the walk lost some", len(byPkg), root)
	}
	var pkgs []string
	for p := range byPkg {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, pkg := range pkgs {
		l := layerOf(ls, pkg)
		if l < 0 {
			t.Errorf("package %s has no layer: add it to Layers", pkg)
			continue
		}
		for _, dep := range byPkg[pkg] {
			if strings.HasPrefix(pkg, dep+"/") {
				continue // a package nested under dep
			}
			if d := layerOf(ls, dep); d >= l {
				t.Errorf("%s (layer %d) imports %s (layer %d): a package imports only lower layers", pkg, l, dep, d)
			}
		}
	}
	for _, l := range ls {
		for _, p := range l {
			if _, ok := byPkg[p]; !ok && !strings.HasSuffix(p, "/") {
				t.Errorf("Layers names %s, which is no package", p)
			}
		}
	}
}

package testutil_test

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aglrl/agl/internal/testutil"
)

// noRaceList is the non-race lane's list, relative to the repository root.
const noRaceList = "scripts/norace-tests.txt"

// TestNonRaceLane: scripts/norace-tests.txt names exactly the tests that
// call testutil.SkipRace, package by package, so a test skipped under the
// race detector still runs in CI, and nothing else runs twice. The list's
// names are joined into one -run pattern over its packages, so no other
// test of a listed package may bear a listed name.
func TestNonRaceLane(t *testing.T) {
	t.Parallel()
	root, err := testutil.Root()
	if err != nil {
		t.Fatal(err)
	}
	listed, err := readNoRaceList(filepath.Join(root, noRaceList))
	if err != nil {
		t.Fatal(err)
	}
	skipping, all, misplaced, err := raceSkippers(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range misplaced {
		t.Errorf("%s calls testutil.SkipRace outside a test function: call it in the test itself, so that its lane can be seen", fn)
	}
	for pkg, names := range skipping {
		for _, name := range names {
			if !slices.Contains(listed[pkg], name) {
				t.Errorf("%s %s calls testutil.SkipRace but is not in %s: it would run in no lane of CI", pkg, name, noRaceList)
			}
		}
	}
	var pattern []string
	for pkg, names := range listed {
		for _, name := range names {
			if !slices.Contains(skipping[pkg], name) {
				t.Errorf("%s names %s %s, which does not call testutil.SkipRace (it would run in both lanes, or does not exist)", noRaceList, pkg, name)
			}
			pattern = append(pattern, name)
		}
	}
	for pkg := range listed {
		for _, name := range all[pkg] {
			if slices.Contains(pattern, name) && !slices.Contains(listed[pkg], name) {
				t.Errorf("%s %s matches the non-race lane's -run pattern but is not listed for %s", pkg, name, pkg)
			}
		}
	}
}

// readNoRaceList reads the list: "./pkg TestA TestB" per line, # comments.
func readNoRaceList(path string) (map[string][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string][]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		if len(fields) < 2 || !strings.HasPrefix(fields[0], "./") {
			return nil, fmt.Errorf("%s:%d: want \"./package TestName...\", got %q", path, n, sc.Text())
		}
		out[fields[0]] = append(out[fields[0]], fields[1:]...)
	}
	return out, sc.Err()
}

// raceSkippers parses every _test.go file under root and returns, per
// package ("./dir"), the top-level tests whose body calls
// testutil.SkipRace, and all its top-level tests; misplaced names the other
// functions that call it.
func raceSkippers(root string) (skipping, all map[string][]string, misplaced []string, err error) {
	skipping, all = map[string][]string{}, map[string][]string{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg := "./" + filepath.ToSlash(rel)
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			if fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Name.Name == "TestMain" {
				if callsSkipRace(fn.Body) {
					misplaced = append(misplaced, pkg+" "+fn.Name.Name)
				}
				continue
			}
			all[pkg] = append(all[pkg], fn.Name.Name)
			if callsSkipRace(fn.Body) {
				skipping[pkg] = append(skipping[pkg], fn.Name.Name)
			}
		}
		return nil
	})
	return skipping, all, misplaced, err
}

// callsSkipRace reports whether body calls testutil.SkipRace anywhere.
func callsSkipRace(body *ast.BlockStmt) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return !found
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "SkipRace" {
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "testutil" {
				found = true
			}
		}
		return !found
	})
	return found
}

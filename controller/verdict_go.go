package controller

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// The gotest verdict (docs/concepts/verdict.md). The code under test runs
// in the test binary with the testing package, so whatever the binary
// prints (test2json framing, JSON events, on its own stdout or on another
// process's through /proc) is not trusted. Instead:
//   - the controller adds a verdict test to each package directory with
//     test files (writeGoVerdictTests): it runs the package's tests as
//     subtests, records how each ended, and prints a report line
//     authenticated (HMAC-SHA256) with the evaluation's key, which is in
//     its source;
//   - verdict_gotest.sh has go build every test binary (no workspace code
//     runs), removes the generated sources, then runs each binary with
//     only the verdict tests selected;
//   - statuses come only from report lines whose MAC verifies; any other
//     report line makes the verdict untrusted, as do a failed build and
//     an exit status that disagrees with the statuses.

// goTestCommand is where a gotest task's test command runs `go test`;
// -exec is put after it.
var goTestCommand = regexp.MustCompile(`(^|[\s;&|(])go\s+test(\s|$)`)

// goVerdictReport starts a verdict test's report line.
const goVerdictReport = "agl-verdict "

// gotestCommand is the command that runs a gotest task's test command
// through script (verdict_gotest.sh, at its path in the sandbox), removing
// generated (paths relative to the workspace) before any test binary runs.
func gotestCommand(command, script string, generated []string) string {
	exec := shellQuote("sh " + shellQuote(script) + " record")
	command = goTestCommand.ReplaceAllString(command, "${1}go test -count=1 -exec "+strings.ReplaceAll(exec, "$", "$$")+"${2}")
	words := []string{"sh", shellQuote(script), "run", shellQuote(command)}
	for _, g := range generated {
		words = append(words, shellQuote(g))
	}
	return strings.Join(words, " ")
}

// writeGoVerdictTests writes a verdict test into each package directory
// under dir that has Go test files: zz_agl_verdict_test.go for the
// package's own tests (TestAglVerdict), zz_agl_verdict_x_test.go for its
// external _test package (TestAglVerdictX). It returns their paths
// relative to dir. A file the agent left at such a path is replaced.
func writeGoVerdictTests(dir string, key []byte) ([]string, error) {
	var written []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.IsDir() {
			return nil
		}
		if n := e.Name(); p != dir && (n == "testdata" || n == "vendor" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_")) {
			return filepath.SkipDir
		}
		pkg, err := build.Default.ImportDir(p, build.ImportComment)
		if err != nil {
			// No Go files, or files go cannot build: go test reports
			// the latter.
			return nil
		}
		for _, v := range []struct {
			file, test, name string
			files            []string
		}{
			{"zz_agl_verdict_test.go", "TestAglVerdict", pkg.Name, pkg.TestGoFiles},
			{"zz_agl_verdict_x_test.go", "TestAglVerdictX", pkg.Name + "_test", pkg.XTestGoFiles},
		} {
			tests := goTestFuncs(p, v.files)
			if len(tests) == 0 {
				continue
			}
			f := filepath.Join(p, v.file)
			if err := writeNew(f, goVerdictSource(v.name, v.test, tests, key)); err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, f)
			written = append(written, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("the verdict tests: %w", err)
	}
	return written, nil
}

// writeNew writes b to a new file at p, removing what was there (a link
// is removed, not followed).
func writeNew(p string, b []byte) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	return errors.Join(err, f.Close())
}

// goTestFuncs lists the test functions (func TestXxx(*testing.T)) the
// files (in dir) declare, as go test finds them; a file that does not
// parse is skipped (go test reports it).
func goTestFuncs(dir string, files []string) []string {
	var tests []string
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			continue
		}
		testing := ""
		for _, im := range f.Imports {
			if p, _ := strconv.Unquote(im.Path.Value); p == "testing" {
				testing = "testing"
				if im.Name != nil {
					testing = im.Name.Name
				}
			}
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Type.TypeParams != nil || fn.Type.Results != nil || !isGoTest(fn.Name.Name) || len(fn.Type.Params.List) != 1 || len(fn.Type.Params.List[0].Names) > 1 {
				continue
			}
			star, ok := fn.Type.Params.List[0].Type.(*ast.StarExpr)
			if !ok {
				continue
			}
			if sel, ok := star.X.(*ast.SelectorExpr); ok && sel.Sel.Name == "T" {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == testing && testing != "" {
					tests = append(tests, fn.Name.Name)
				}
			}
		}
	}
	slices.Sort(tests)
	return slices.Compact(tests)
}

// isGoTest is go test's rule for a test function's name: Test, then
// nothing or a rune that is not lower case.
func isGoTest(name string) bool {
	rest, ok := strings.CutPrefix(name, "Test")
	if !ok {
		return false
	}
	r, _ := utf8.DecodeRuneInString(rest)
	return rest == "" || !unicode.IsLower(r)
}

// goVerdictSource is a verdict test, TestAglVerdict in package pkg: it
// runs tests as subtests and, once they all ended, prints the report line
// "agl-verdict IMPORTPATH Name=status… MAC" (statuses passed, failed,
// skipped; failed when the test did not return, missing when it never
// ran).
func goVerdictSource(pkg, test string, tests []string, key []byte) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `// Code generated by agl for one test verdict; removed before the tests run. DO NOT EDIT.

package %s

import (
	aglVerdictHMAC "crypto/hmac"
	aglVerdictSHA256 "crypto/sha256"
	aglVerdictHex "encoding/hex"
	aglVerdictOS "os"
	aglVerdictReflect "reflect"
	aglVerdictStrings "strings"
	aglVerdictTesting "testing"
)

func %s(t *aglVerdictTesting.T) {
	type pkg struct{}
	tests := []struct {
		name string
		f    func(*aglVerdictTesting.T)
	}{
`, pkg, test)
	for _, n := range tests {
		fmt.Fprintf(&b, "\t\t{%q, %s},\n", n, n)
	}
	fmt.Fprintf(&b, `	}
	status := make([]string, len(tests))
	for i := range status {
		status[i] = "missing"
	}
	t.Cleanup(func() {
		line := []string{%q + aglVerdictStrings.TrimSuffix(aglVerdictReflect.TypeOf(pkg{}).PkgPath(), "_test")}
		for i, c := range tests {
			line = append(line, c.name+"="+status[i])
		}
		body := aglVerdictStrings.Join(line, " ")
		m := aglVerdictHMAC.New(aglVerdictSHA256.New, []byte(%q))
		m.Write([]byte(body))
		aglVerdictOS.Stdout.WriteString("\n" + body + " " + aglVerdictHex.EncodeToString(m.Sum(nil)) + "\n")
	})
	for i, c := range tests {
		i, c := i, c
		t.Run(c.name, func(t *aglVerdictTesting.T) {
			returned := false
			t.Cleanup(func() {
				switch {
				case t.Failed():
					status[i] = "failed"
				case t.Skipped():
					status[i] = "skipped"
				case !returned: // a panic, or runtime.Goexit
					status[i] = "failed"
				default:
					status[i] = "passed"
				}
			})
			c.f(t)
			returned = true
		})
	}
}
`, goVerdictReport, string(key))
	return []byte(b.String())
}

// goEvent is one line of `go test -json`.
type goEvent struct {
	Action      string `json:"Action"`
	Package     string `json:"Package"`
	Test        string `json:"Test"`
	FailedBuild string `json:"FailedBuild"`
}

// goVerdictID is a gotest id: the package's import path, a dot, the test's
// name ("example.com/calc.TestAdd", "example.com/calc.TestMul/neg").
func goVerdictID(pkg, test string) string { return pkg + "." + test }

// goStream reads a gotest run's stdout as it comes: go test's JSON events
// (only a failed build counts) and the verdict tests' report lines. It
// holds at most one line; a line of maxGoLine bytes or more is skipped.
type goStream struct {
	key      []byte
	mu       sync.Mutex
	buf      []byte // the current line so far
	long     bool   // the current line is too long: skipped
	statuses map[string]string
	failed   []string // packages that failed to build
	forged   int      // report lines whose MAC does not verify
}

const maxGoLine = 1 << 20

func newGoStream(key []byte) *goStream { return &goStream{key: key, statuses: map[string]string{}} }

func (g *goStream) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := len(p)
	for {
		if len(g.buf) == 0 && !g.long {
			p = bytes.TrimLeft(p, "\n") // blank lines, in one pass
		}
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			g.add(p)
			return n, nil
		}
		g.add(p[:i])
		g.end()
		p = p[i+1:]
	}
}

func (g *goStream) add(b []byte) {
	switch {
	case g.long:
	case len(g.buf)+len(b) >= maxGoLine:
		g.long, g.buf = true, g.buf[:0]
	default:
		g.buf = append(g.buf, b...)
	}
}

// end ends the current line.
func (g *goStream) end() {
	if !g.long && len(g.buf) > 0 {
		g.line(g.buf)
	}
	g.buf, g.long = g.buf[:0], false
}

// close reads the last line, if it has no newline.
func (g *goStream) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.end()
}

func (g *goStream) line(l []byte) {
	if r, ok := bytes.CutPrefix(l, []byte(goVerdictReport)); ok {
		g.report(l, r)
		return
	}
	var ev goEvent
	// Every event is a JSON object: a flood of other lines costs no
	// decoding.
	if l = bytes.TrimLeft(l, " \t"); len(l) == 0 || l[0] != '{' || json.Unmarshal(l, &ev) != nil || ev.Package == "" {
		return
	}
	if ev.FailedBuild != "" && ev.Test == "" && (ev.Action == "fail" || ev.Action == "pass" || ev.Action == "skip") {
		g.failed = append(g.failed, ev.Package+" [build failed]")
	}
}

// report reads a report line l ("agl-verdict IMPORTPATH Name=status…
// MAC"; r is l without its prefix).
func (g *goStream) report(l, r []byte) {
	i := bytes.LastIndexByte(l, ' ')
	m := hmac.New(sha256.New, g.key)
	m.Write(l[:i])
	f := strings.Fields(string(r[:max(0, i-len(goVerdictReport))]))
	if !hmac.Equal(l[i+1:], []byte(hex.EncodeToString(m.Sum(nil)))) || len(f) < 1 {
		g.forged++
		return
	}
	for _, st := range f[1:] {
		name, s, _ := strings.Cut(st, "=")
		if s != testPassed && s != testFailed && s != testSkipped && s != testMissing {
			s = testError
		}
		id := goVerdictID(f[0], name)
		if old, ok := g.statuses[id]; !ok || rank(s) > rank(old) {
			g.statuses[id] = s
		}
	}
}

// goStatuses are the statuses of ids: a subtest's ("pkg.TestMul/neg") is
// its top-level test's, whose subtests all passed when it passed.
func goStatuses(st map[string]string, ids []string) map[string]string {
	m := make(map[string]string, len(ids))
	for _, id := range ids {
		s, ok := st[id]
		for p := id; !ok; {
			i := strings.LastIndexByte(p, '/')
			if i < 0 {
				s = testMissing
				break
			}
			p = p[:i]
			s, ok = st[p]
		}
		m[id] = s
	}
	return m
}

// goVerdict is why the verdict of a gotest run cannot be trusted ("" when
// it can): a package that failed to build, a report line not authenticated
// with the evaluation's key, or an exit status that disagrees with the
// statuses of ids.
func goVerdict(g *goStream, exit int, ids []string) string {
	if len(g.failed) > 0 {
		return fmt.Sprintf("untrusted verdict: %s (exit status %d)", strings.Join(g.failed[:min(len(g.failed), 3)], ", "), exit)
	}
	if g.forged > 0 {
		return fmt.Sprintf("untrusted verdict: %d report lines not authenticated with the evaluation's key (exit status %d)", g.forged, exit)
	}
	all := true
	for _, s := range goStatuses(g.statuses, ids) {
		all = all && s == testPassed
	}
	if all != (exit == 0) {
		return fmt.Sprintf("untrusted verdict: exit status %d disagrees with the verdict tests' reports (every test passed: %v)", exit, all)
	}
	return ""
}

// rank orders statuses from best to worst.
func rank(s string) int {
	switch s {
	case testPassed:
		return 0
	case testSkipped:
		return 1
	case testFailed:
		return 2
	case testMissing:
		return 3
	}
	return 4
}

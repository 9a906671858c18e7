package controller

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// runGoTests copies testdata/gorepo with files added or replaced and runs
// `go test -json ./...` in it as a gotest task's test command runs (a real
// go command, through the verdict runner, outside a sandbox), read by
// goStream. The generated verdict tests must be gone afterwards.
func runGoTests(t *testing.T, files map[string]string) (*goStream, int, string) {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"go.mod", "calc.go", "calc_test.go"} {
		b, err := os.ReadFile(filepath.Join("testdata/gorepo", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, text := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	key, err := newVerdictKey()
	if err != nil {
		t.Fatal(err)
	}
	generated, err := writeGoVerdictTests(dir, key.hex())
	if err != nil {
		t.Fatal(err)
	}
	script, err := writeRunner(filepath.Join(t.TempDir(), "verdict"), "verdict_gotest.sh", gotestRunner)
	if err != nil {
		t.Fatal(err)
	}
	g := newGoStream(key.hex())
	var stderr bytes.Buffer
	cmd := exec.Command("sh", "-c", gotestCommand("go test -json ./...", script, generated))
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, g, &stderr
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
	err = cmd.Run()
	g.close()
	exit := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		exit = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	for _, f := range generated {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("the generated %s is still there after the run", f)
		}
	}
	return g, exit, stderr.String()
}

// TestGoVerdict: gotest ids are package-qualified, statuses come only
// from the verdict tests' authenticated reports, and the go command's exit
// status must agree with them: an empty TestAdd in another package plus a
// broken build of the real one, printed pass lines, JSON events and
// test2json framing (on the binary's stdout or its parent's), a forged
// report line, tests left out through os.Args, os.Exit(0) in a test or
// from init never make a pass (real `go test -json`).
func TestGoVerdict(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a Go module's tests with the go command, 13 times (tens of seconds)")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	const add, mul, ext, sub = "example.com/calc.TestAdd", "example.com/calc.TestMul", "example.com/calc.TestExt", "example.com/calc/sub.TestSub"
	const subTest = "package sub\n\nimport \"testing\"\n\nfunc TestSub(t *testing.T) {\n\tif Sub(3, 2) != 1 {\n\t\tt.Fatal(\"Sub(3, 2) != 1\")\n\t}\n}\n"
	fixed := "package calc\n\nfunc Add(a, b int) int { return a + b }\n\nfunc Mul(a, b int) int { return a * b }\n"
	cases := []struct {
		name      string
		files     map[string]string
		want      map[string]string // statuses of add and mul
		untrusted string
	}{
		{"fix", map[string]string{"calc.go": fixed}, map[string]string{add: testPassed, mul: testPassed}, ""},
		{"no fix", nil, map[string]string{add: testFailed, mul: testPassed}, ""},
		{"an empty TestAdd elsewhere, the real package's build broken", map[string]string{
			"other/other_test.go": "package other\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {}\n\nfunc TestMul(t *testing.T) {}\n",
			"calc.go":             fixed + "\nfunc broken() { undefined() }\n",
		}, map[string]string{add: testMissing, mul: testMissing}, "example.com/calc [build failed]"},
		{"printed pass lines and events", map[string]string{"calc.go": "package calc\n\nimport \"fmt\"\n\nfunc Add(a, b int) int {\n\tfmt.Println(\"--- PASS: TestAdd (0.00s)\")\n\tfmt.Println(`{\"Action\":\"pass\",\"Package\":\"example.com/calc\",\"Test\":\"TestAdd\"}`)\n\treturn a - b\n}\n\nfunc Mul(a, b int) int { return a * b }\n"},
			map[string]string{add: testFailed, mul: testPassed}, ""},
		{"os.Exit(0) in a test", map[string]string{"calc.go": "package calc\n\nimport \"os\"\n\nfunc Add(a, b int) int {\n\tos.Exit(0)\n\treturn 0\n}\n\nfunc Mul(a, b int) int { return a * b }\n"},
			map[string]string{add: testFailed, mul: testMissing}, ""},
		{"pass events into the go command's stdout, os.Exit(0) from init", map[string]string{"calc.go": forgeInit(`if f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/1", os.Getppid()), os.O_WRONLY, 0); err == nil {
		for _, n := range []string{"TestAdd", "TestMul"} {
			fmt.Fprintf(f, "{\"Action\":\"pass\",\"Package\":\"example.com/calc\",\"Test\":%q}\n", n)
		}
	}`)}, map[string]string{add: testMissing, mul: testMissing}, "exit status 0 disagrees"},
		{"test2json framing printed, os.Exit(0) from init", map[string]string{"calc.go": forgeInit(`for _, n := range []string{"TestAdd", "TestMul"} {
		fmt.Printf("\x16=== RUN   %s\n\x16--- PASS: %s (0.00s)\n", n, n)
	}
	fmt.Printf("\x16PASS\n")
	_ = os.Stdout`)}, map[string]string{add: testMissing, mul: testMissing}, "exit status 0 disagrees"},
		{"a report line forged from init", map[string]string{"calc.go": forgeInit(`fmt.Printf("\nagl-verdict example.com/calc TestAdd=passed TestMul=passed %064x\n", 0)`)},
			map[string]string{add: testMissing, mul: testMissing}, "1 report lines not authenticated"},
		{"TestAdd left out through os.Args from init", map[string]string{"calc.go": "package calc\n\nimport \"os\"\n\nfunc init() {\n\tos.Args = append(os.Args, \"-test.run=^TestAglVerdict$/^TestMul$\", \"-test.skip=TestAdd\")\n}\n\nfunc Add(a, b int) int { return a - b }\n\nfunc Mul(a, b int) int { return a * b }\n"},
			map[string]string{add: testMissing, mul: testPassed}, "exit status 0 disagrees"},
		{"fix, and an external test package", map[string]string{"calc.go": fixed, "ext_test.go": "package calc_test\n\nimport (\n\t\"testing\"\n\n\t\"example.com/calc\"\n)\n\nfunc TestExt(t *testing.T) {\n\tif calc.Mul(2, 2) != 4 {\n\t\tt.Fatal(\"Mul\")\n\t}\n}\n"},
			map[string]string{add: testPassed, mul: testPassed, ext: testPassed}, ""},
		{"a tests package in a subdirectory", map[string]string{"sub/sub.go": "package sub\n\nfunc Sub(a, b int) int { return a - b }\n", "sub/sub_test.go": subTest},
			map[string]string{add: testFailed, sub: testPassed}, ""},
		{"a tests package in a subdirectory, pass events for it into the parent's stdout, os.Exit(0) from its init", map[string]string{
			"sub/sub.go":      "package sub\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc init() {\n\tif f, err := os.OpenFile(fmt.Sprintf(\"/proc/%d/fd/1\", os.Getppid()), os.O_WRONLY, 0); err == nil {\n\t\tfmt.Fprintln(f, `{\"Action\":\"pass\",\"Package\":\"example.com/calc/sub\",\"Test\":\"TestSub\"}`)\n\t}\n\tos.Exit(0)\n}\n\nfunc Sub(a, b int) int { return a + b }\n",
			"sub/sub_test.go": subTest, "calc.go": fixed},
			map[string]string{add: testPassed, sub: testMissing}, "exit status 0 disagrees"},
		{"no fix, and an external test package", map[string]string{"ext_test.go": "package calc_test\n\nimport (\n\t\"testing\"\n\n\t\"example.com/calc\"\n)\n\nfunc TestExt(t *testing.T) {\n\tif calc.Add(2, 2) != 4 {\n\t\tt.Fatal(\"Add\")\n\t}\n}\n"},
			map[string]string{add: testFailed, mul: testPassed, ext: testFailed}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // each runs the go command in a folder of its own
			ids := slices.Sorted(maps.Keys(c.want))
			g, exit, stderr := runGoTests(t, c.files)
			got := goStatuses(g.statuses, ids)
			reason := goVerdict(g, exit, ids)
			if !maps.Equal(got, c.want) || (c.untrusted == "") != (reason == "") || !strings.Contains(reason, c.untrusted) {
				t.Errorf("statuses %v, untrusted %q (exit %d); want %v, untrusted %q\n%s", got, reason, exit, c.want, c.untrusted, stderr)
			}
		})
	}
}

// forgeInit is a calc.go whose Add is still broken and whose init runs
// forge, then exits 0 before any test runs.
func forgeInit(forge string) string {
	return "package calc\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc init() {\n\t" + forge + "\n\tos.Exit(0)\n}\n\nfunc Add(a, b int) int { return a - b }\n\nfunc Mul(a, b int) int { return a * b }\n"
}

// FuzzUnittestVerdict: whatever the report's bytes (a body signed with the
// evaluation's key, or arbitrary bytes where the signature goes) and the
// exit status, the verdict is a pass only when the report is the runner's
// (authentic), says success without tamper, every id passed, and the exit
// status is 0; and then it is a pass.
func FuzzUnittestVerdict(f *testing.F) {
	key := []byte("0123456789abcdef0123456789abcdef")
	ids := []string{"m.T.test_a"}
	f.Add([]byte(`{"tests":{"m.T.test_a":"passed"},"success":true}`), true, 0, []byte(""))
	f.Add([]byte(`{"tests":{"m.T.test_a":"passed"},"success":true}`), true, 1, []byte(""))
	f.Add([]byte(`{"tests":{"m.T.test_a":"passed"},"success":true}`), false, 0, []byte("test_a (m.T.test_a) ... ok"))
	f.Add([]byte(`{"tests":{"m.T.test_a":"passed"},"success":true,"tamper":["x"]}`), true, 0, []byte(""))
	f.Add([]byte(`{"tests":{"m.T.test_a":"failed"},"success":false}`), true, 1, []byte(""))
	f.Add([]byte(`{"tests":{"m.T.test_a":"passed"},"success":false}`), true, 0, []byte(""))
	f.Fuzz(func(t *testing.T, body []byte, sign bool, exit int, tail []byte) {
		m := hmac.New(sha256.New, key)
		m.Write(body)
		report := append(append([]byte(nil), body...), '\n')
		if sign {
			report = append(report, hex.EncodeToString(m.Sum(nil))...)
		} else {
			report = append(report, tail...)
		}
		st, _, reason := unittestVerdict(report, key, exit, ids)
		reward, why := score(statuses(st, ids), nil, false)
		pass := reason == "" && reward == 1 && why == ""

		authentic := !bytes.Contains(body, []byte("\n")) && (sign || hmac.Equal(bytes.TrimSuffix(tail, []byte("\n")), []byte(hex.EncodeToString(m.Sum(nil)))))
		var r runnerReport
		trusted := authentic && json.Unmarshal(body, &r) == nil && len(r.Tamper) == 0 && r.Success && exit == 0 && r.Tests[ids[0]] == testPassed
		for _, s := range r.Tests {
			trusted = trusted && (s == testPassed || s == testFailed || s == testError || s == testSkipped)
		}
		if pass != trusted {
			t.Fatalf("report %q exit %d: pass %v (reason %q), want %v", report, exit, pass, reason, trusted)
		}
	})
}

// FuzzGoVerdict: whatever a gotest run's stdout (arbitrary bytes, written
// in two chunks split anywhere) and exit status, the verdict is a pass
// exactly when the exit status is 0, no package failed to build, no report
// line fails authentication, and the authenticated reports give the id
// (or, for a subtest, its top-level test) passed and nothing worse.
func FuzzGoVerdict(f *testing.F) {
	key := []byte("0123456789abcdef0123456789abcdef")
	const id = "p.TestA/sub"
	sign := func(body string) string {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(body))
		return body + " " + hex.EncodeToString(m.Sum(nil)) + "\n"
	}
	f.Add([]byte(sign("agl-verdict p TestA=passed")), 0, 10)
	f.Add([]byte(sign("agl-verdict p TestA=passed")), 1, 3)
	f.Add([]byte(sign("agl-verdict p TestA/sub=failed TestA=passed")), 0, 3)
	f.Add([]byte(sign("agl-verdict q TestA=passed")+`{"Action":"fail","Package":"p","FailedBuild":"p"}`+"\n"), 0, 0)
	f.Add([]byte(sign("agl-verdict p TestA=passed")+`{"Action":"fail","Package":"p","FailedBuild":"p"}`+"\n"), 0, 0)
	f.Add([]byte("\x16--- PASS: TestA (0.00s)\n"+`{"Action":"pass","Package":"p","Test":"TestA"}`+"\nagl-verdict p TestA=passed 00\n"), 0, 5)
	f.Add([]byte(sign("agl-verdict p TestA=passed")+sign("agl-verdict p TestA=missing")), 0, 50)
	f.Fuzz(func(t *testing.T, out []byte, exit, split int) {
		g := newGoStream(key)
		k := 0
		if len(out) > 0 {
			k = (split%len(out) + len(out)) % len(out)
		}
		g.Write(out[:k])
		g.Write(out[k:])
		g.close()
		pass := goVerdict(g, exit, []string{id}) == "" && goStatuses(g.statuses, []string{id})[id] == testPassed

		bad := false
		exact, top := []string{}, []string{}
		for _, l := range bytes.Split(out, []byte("\n")) {
			if len(l) >= maxGoLine {
				continue
			}
			if bytes.HasPrefix(l, []byte("agl-verdict ")) {
				i := bytes.LastIndexByte(l, ' ')
				m := hmac.New(sha256.New, key)
				m.Write(l[:i])
				fields := strings.Fields(string(l[len("agl-verdict "):max(i, len("agl-verdict "))]))
				if hex.EncodeToString(m.Sum(nil)) != string(l[i+1:]) || len(fields) == 0 {
					bad = true
					continue
				}
				for _, st := range fields[1:] {
					name, s, _ := strings.Cut(st, "=")
					switch fields[0] + "." + name {
					case id:
						exact = append(exact, s)
					case "p.TestA":
						top = append(top, s)
					}
				}
				continue
			}
			var ev goEvent
			if json.Unmarshal(bytes.TrimLeft(l, " \t"), &ev) == nil && ev.Package != "" && ev.FailedBuild != "" && ev.Test == "" && (ev.Action == "pass" || ev.Action == "fail" || ev.Action == "skip") {
				bad = true
			}
		}
		st := exact
		if len(st) == 0 {
			st = top
		}
		want := exit == 0 && !bad && len(st) > 0
		for _, s := range st {
			want = want && s == testPassed
		}
		if pass != want {
			t.Fatalf("output %q exit %d: pass %v, want %v", out, exit, pass, want)
		}
	})
}

// BenchmarkGoVerdict: one gotest evaluation of testdata/gorepo with a real
// go command and a warm build cache (outside a sandbox): "direct" is
// `go test -json` read as it was before the verdict tests, "runner" the
// verdict runner (generated verdict tests, build, then run).
func BenchmarkGoVerdict(b *testing.B) {
	if _, err := exec.LookPath("go"); err != nil {
		b.Skip("no go command")
	}
	dir := b.TempDir()
	for _, f := range []string{"go.mod", "calc.go", "calc_test.go"} {
		buf, err := os.ReadFile(filepath.Join("testdata/gorepo", f))
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	script, err := writeRunner(filepath.Join(b.TempDir(), "verdict"), "verdict_gotest.sh", gotestRunner)
	if err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, command string, key []byte) {
		cmd := exec.Command("sh", "-c", command)
		cmd.Dir, cmd.Stdout = dir, newGoStream(key)
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
		if err := cmd.Run(); err == nil {
			b.Fatal("the broken Add passed")
		}
	}
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			run(b, "go test -json -count=1 ./...", nil)
		}
	})
	b.Run("runner", func(b *testing.B) {
		for b.Loop() {
			key, err := newVerdictKey()
			if err != nil {
				b.Fatal(err)
			}
			generated, err := writeGoVerdictTests(dir, key.hex())
			if err != nil {
				b.Fatal(err)
			}
			run(b, gotestCommand("go test -json ./...", script, generated), key.hex())
		}
	})
}

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
	"strings"
	"testing"
)

// runGoTests copies testdata/gorepo with files added or replaced and runs
// `go test -json ./...` in it (a real go command), through goStream.
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
	g := newGoStream()
	var stderr bytes.Buffer
	cmd := exec.Command("go", "test", "-json", "-count=1", "./...")
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, g, &stderr
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
	err := cmd.Run()
	g.close()
	exit := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		exit = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return g, exit, stderr.String()
}

// TestGoVerdict: gotest ids are package-qualified and the go command's
// exit status must agree with its events: an empty TestAdd in another
// package plus a broken build of the real one, printed pass lines, forged
// JSON events and os.Exit(0) never make a pass (real `go test -json`).
func TestGoVerdict(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	const add, mul = "example.com/calc.TestAdd", "example.com/calc.TestMul"
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
	}
	ids := []string{add, mul}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, exit, stderr := runGoTests(t, c.files)
			got := map[string]string{}
			for _, id := range ids {
				got[id] = statuses(g.statuses, ids)[id]
			}
			reason := goVerdict(g.statuses, g.failed, exit, ids)
			if !maps.Equal(got, c.want) || (c.untrusted == "") != (reason == "") || !strings.Contains(reason, c.untrusted) {
				t.Errorf("statuses %v, untrusted %q (exit %d); want %v, untrusted %q\n%s", got, reason, exit, c.want, c.untrusted, stderr)
			}
		})
	}
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

// FuzzGoVerdict: whatever go test's stdout (arbitrary bytes, written in two
// chunks split anywhere) and exit status, the verdict is a pass exactly
// when the exit status is 0, no package failed to build, and each id's
// events (JSON lines) are passes, at least one.
func FuzzGoVerdict(f *testing.F) {
	ids := []string{"p.TestA"}
	f.Add([]byte(`{"Action":"pass","Package":"p","Test":"TestA"}`+"\n"), 0, 10)
	f.Add([]byte(`{"Action":"pass","Package":"p","Test":"TestA"}`+"\n"), 1, 3)
	f.Add([]byte(`{"Action":"pass","Package":"q","Test":"TestA"}`+"\n"+`{"Action":"fail","Package":"p","FailedBuild":"p"}`+"\n"), 1, 0)
	f.Add([]byte("--- PASS: TestA (0.00s)\nok p\n"), 0, 5)
	f.Add([]byte(`{"Action":"pass","Package":"p","Test":"TestA"}`+"\n"+`{"Action":"fail","Package":"p","Test":"TestA"}`), 0, 50)
	f.Fuzz(func(t *testing.T, out []byte, exit, split int) {
		g := newGoStream()
		k := 0
		if len(out) > 0 {
			k = (split%len(out) + len(out)) % len(out)
		}
		g.Write(out[:k])
		g.Write(out[k:])
		g.close()
		reward, why := score(statuses(g.statuses, ids), nil, false)
		pass := goVerdict(g.statuses, g.failed, exit, ids) == "" && reward == 1 && why == ""

		want, seen, build := exit == 0, false, false
		for _, l := range bytes.Split(out, []byte("\n")) {
			var ev goEvent
			if len(l) >= maxGoLine || json.Unmarshal(l, &ev) != nil || ev.Package == "" {
				continue
			}
			build = build || (ev.FailedBuild != "" && ev.Test == "" && (ev.Action == "pass" || ev.Action == "fail" || ev.Action == "skip"))
			if goVerdictID(ev.Package, ev.Test) != ids[0] || ev.Test == "" {
				continue
			}
			switch ev.Action {
			case "pass":
				seen = true
			case "fail", "skip":
				want = false
			}
		}
		want = want && seen && !build
		if pass != want {
			t.Fatalf("output %q exit %d: pass %v, want %v", out, exit, pass, want)
		}
	})
}

package controller

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// The verdict of a test run (docs/concepts/verdict.md) comes from a channel
// the code under test cannot write to, and the run's exit status must agree
// with it:
//   - unittest: verdictRunner, loaded from a read-only directory in place of
//     `python3 -m unittest`, writes a report authenticated with a key only it
//     reads (on stdin, before any workspace code runs);
//   - gotest: go builds the test binaries, which keep a generated verdict
//     test holding a key; its source is removed before any binary runs; the
//     verdict test runs the package's tests and prints a report
//     authenticated with that key (verdict_gotest.sh).

// verdictRunner is the unittest runner (run as `python3 -I verdict_runner.py`).
//
//go:embed verdict_runner.py
var verdictRunner []byte

// gotestRunner runs a gotest task's test command (verdict_gotest.sh).
//
//go:embed verdict_gotest.sh
var gotestRunner []byte

// unittestModule is what a unittest task's test command runs
// (`-m unittest`, a word of its own); the controller runs the verdict
// runner in its place.
var unittestModule = regexp.MustCompile(`(^|\s)-m\s+unittest(\s|$)`)

// maxReportBytes bounds the runner's report the controller reads.
const maxReportBytes = 16 << 20

// verdictKey is one evaluation's secret: the key the runner authenticates
// its report with and the report's name.
type verdictKey struct {
	key    []byte
	report string // the report's file name in the test workspace
}

func newVerdictKey() (verdictKey, error) {
	b := make([]byte, 48)
	if _, err := rand.Read(b); err != nil {
		return verdictKey{}, fmt.Errorf("tests: the verdict key: %w", err)
	}
	return verdictKey{key: b[:32], report: ".agl-verdict-" + hex.EncodeToString(b[32:])}, nil
}

// hex is the key in hex, as a gotest verdict test holds it in its source.
func (k verdictKey) hex() []byte { return []byte(hex.EncodeToString(k.key)) }

// secret is the line the runner reads on stdin.
func (k verdictKey) secret(reportPath, hidden string) []byte {
	b, _ := json.Marshal(map[string]string{"key": hex.EncodeToString(k.key), "report": reportPath, "hidden": hidden})
	return append(b, '\n')
}

// writeRunner writes a runner (src, under name) into dir (bound read-only
// in the sandbox), returning its path.
func writeRunner(dir, name string, src []byte) (string, error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("tests: the verdict runner: %w", err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, src, 0o444); err != nil {
		return "", fmt.Errorf("tests: the verdict runner: %w", err)
	}
	return p, nil
}

// runnerReport is the runner's report.
type runnerReport struct {
	Tests   map[string]string `json:"tests"`
	Success bool              `json:"success"`
	Tamper  []string          `json:"tamper"`
}

// readReport reads the runner's report at p (a regular file, not a link,
// bounded); a missing one reads as empty.
func readReport(p string) ([]byte, error) {
	li, err := os.Lstat(p)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !li.Mode().IsRegular() || !os.SameFile(li, fi) {
		return nil, fmt.Errorf("the verdict report is not a regular file")
	}
	return io.ReadAll(io.LimitReader(f, maxReportBytes))
}

// unittestVerdict is the statuses of a unittest run from the runner's
// report, authenticated with key; reason is why the verdict cannot be
// trusted ("" when it can): no report, a report not the runner's, a
// tampered run, or a report whose success, statuses of ids and the exit
// status do not all agree.
func unittestVerdict(report, key []byte, exit int, ids []string) (statuses map[string]string, tamper []string, reason string) {
	if len(report) == 0 {
		return nil, nil, fmt.Sprintf("untrusted verdict: the test run (exit status %d) ended without the runner's report", exit)
	}
	body, mac, ok := bytes.Cut(bytes.TrimSuffix(report, []byte("\n")), []byte("\n"))
	want := hmac.New(sha256.New, key)
	want.Write(body)
	if !ok || !hmac.Equal(mac, []byte(hex.EncodeToString(want.Sum(nil)))) {
		return nil, nil, "untrusted verdict: the report is not the runner's (bad authentication)"
	}
	var r runnerReport
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, nil, fmt.Sprintf("untrusted verdict: the report: %v", err)
	}
	if len(r.Tamper) > 0 {
		return r.Tests, r.Tamper, "untrusted verdict: tampered: " + strings.Join(r.Tamper[:min(len(r.Tamper), 3)], "; ")
	}
	all := true
	for _, id := range ids {
		all = all && r.Tests[id] == testPassed
	}
	if r.Success != (exit == 0) || r.Success != all {
		return r.Tests, nil, fmt.Sprintf("untrusted verdict: exit status %d, the report's success (%v) and its tests (every one passed: %v) disagree", exit, r.Success, all)
	}
	for _, s := range r.Tests {
		if s != testPassed && s != testFailed && s != testError && s != testSkipped {
			return nil, nil, fmt.Sprintf("untrusted verdict: the report has status %q", s)
		}
	}
	return r.Tests, nil, ""
}

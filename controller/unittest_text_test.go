package controller_test

import (
	"maps"
	"regexp"
	"strings"
	"testing"
)

// TestParseUnittest: the direct run's parser reads real output shapes of
// Python's unittest -v (3.11 ids and the older "(module.Class)" form,
// output printed mid-line, a docstring line, the failure summary); a test
// reported twice keeps its worst status.
func TestParseUnittest(t *testing.T) {
	cases := []struct {
		name, out string
		want      map[string]string
	}{
		{"unittest 3.11", `test_add (tests.test_calc.TestCalc.test_add) ... FAIL
test_mul (tests.test_calc.TestCalc.test_mul) ... ok
test_neg (tests.test_calc.TestCalc.test_neg) ... ERROR
test_skip (tests.test_calc.TestCalc.test_skip) ... skipped 'not today'
test_xf (tests.test_calc.TestCalc.test_xf) ... expected failure

======================================================================
FAIL: test_add (tests.test_calc.TestCalc.test_add)
----------------------------------------------------------------------
Traceback (most recent call last):
AssertionError: -1 != 5

Ran 5 tests in 0.001s

FAILED (failures=1, errors=1, skipped=1, expected failures=1)
`, map[string]string{"tests.test_calc.TestCalc.test_add": "failed", "tests.test_calc.TestCalc.test_mul": "passed",
			"tests.test_calc.TestCalc.test_neg": "error", "tests.test_calc.TestCalc.test_skip": "skipped", "tests.test_calc.TestCalc.test_xf": "passed"}},
		{"unittest 3.10 ids", "test_add (test_calc.TestCalc) ... ok\n",
			map[string]string{"test_calc.TestCalc.test_add": "passed"}},
		{"output and docstring before the status", "test_add (m.C.test_add) ... printed by the test\nok\ntest_doc (m.C.test_doc)\nAdds numbers. ... FAIL\n",
			map[string]string{"m.C.test_add": "passed", "m.C.test_doc": "failed"}},
		{"a printed pass does not hide a failure", "test_add (m.C.test_add) ... FAIL\ntest_add (m.C.test_add) ... ok\n",
			map[string]string{"m.C.test_add": "failed"}},
		{"nothing ran", "ImportError: no module named calc\n", map[string]string{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := parseUnittest(c.out); !maps.Equal(got, c.want) {
				t.Errorf("got %v\nwant %v", got, c.want)
			}
		})
	}
}

var (
	// unittestLine: "name (module.Class.name) ... status" (Python 3.11+;
	// older versions print "(module.Class)"); the status may follow on a
	// later line when the test printed, or a docstring line comes first.
	unittestLine = regexp.MustCompile(`^(\w+) \(([\w.]+)\)(?:\s*$|\s+(.*)$)`)
	// unittestSummary: "FAIL: name (module.Class.name)" after the run.
	unittestSummary = regexp.MustCompile(`^(FAIL|ERROR|UNEXPECTED SUCCESS): (\w+) \(([\w.]+)\)`)
)

// parseUnittest reads test statuses (passed, failed, error, skipped) by
// test id from Python's `unittest -v` output, for a direct run to compare
// the evaluator's verdict with. A test reported more than once keeps its
// worst status.
func parseUnittest(out string) map[string]string {
	st := map[string]string{}
	set := func(id, s string) {
		if old, ok := st[id]; !ok || rank(s) > rank(old) {
			st[id] = s
		}
	}
	lines := strings.Split(out, "\n")
	pending := ""
	for _, l := range lines {
		l = strings.TrimRight(l, "\r")
		if m := unittestSummary.FindStringSubmatch(l); m != nil {
			set(unittestID(m[2], m[3]), map[string]string{"FAIL": "failed", "ERROR": "error", "UNEXPECTED SUCCESS": "failed"}[m[1]])
			pending = ""
			continue
		}
		if m := unittestLine.FindStringSubmatch(l); m != nil {
			id := unittestID(m[1], m[2])
			if s := unittestStatus(m[3]); s != "" {
				set(id, s)
				pending = ""
			} else {
				pending = id
			}
			continue
		}
		if pending != "" {
			if s := unittestStatus(l); s != "" {
				set(pending, s)
				pending = ""
			}
		}
	}
	return st
}

// unittestID is module.Class.name from the name and the parenthesis.
func unittestID(name, paren string) string {
	if strings.HasSuffix(paren, "."+name) {
		return paren
	}
	return paren + "." + name
}

// unittestStatus reads the status at the end of a verbose line: "... ok",
// or the bare word on its own line.
func unittestStatus(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndex(s, "... "); i >= 0 {
		s = s[i+4:]
	} else if strings.Contains(s, " ") && !strings.HasPrefix(s, "skipped") && !strings.HasPrefix(s, "expected failure") && !strings.HasPrefix(s, "unexpected success") {
		return ""
	}
	switch {
	case s == "ok" || s == "expected failure":
		return "passed"
	case s == "FAIL" || s == "unexpected success":
		return "failed"
	case s == "ERROR":
		return "error"
	case strings.HasPrefix(s, "skipped"):
		return "skipped"
	}
	return ""
}

// rank orders statuses from best to worst.
func rank(s string) int {
	switch s {
	case "passed":
		return 0
	case "skipped":
		return 1
	case "failed":
		return 2
	}
	return 3
}

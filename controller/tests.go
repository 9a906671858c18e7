package controller

import (
	"regexp"
	"strings"
)

var (
	// unittestLine: "name (module.Class.name) ... status" (Python 3.11+;
	// older versions print "(module.Class)"); the status may follow on a
	// later line when the test printed, or a docstring line comes first.
	unittestLine = regexp.MustCompile(`^(\w+) \(([\w.]+)\)(?:\s*$|\s+(.*)$)`)
	// unittestSummary: "FAIL: name (module.Class.name)" after the run.
	unittestSummary = regexp.MustCompile(`^(FAIL|ERROR|UNEXPECTED SUCCESS): (\w+) \(([\w.]+)\)`)
	goTestLine      = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+)`)
)

// ParseTests reads test statuses (passed, failed, error, skipped) by test
// id from a test command's output in format (TestsUnittest, TestsGo).
// A test reported more than once keeps its worst status, so that output a
// tested program prints cannot turn a failure into a pass.
func ParseTests(format, out string) map[string]string {
	st := map[string]string{}
	set := func(id, s string) {
		if old, ok := st[id]; !ok || rank(s) > rank(old) {
			st[id] = s
		}
	}
	lines := strings.Split(out, "\n")
	if format == TestsGo {
		for _, l := range lines {
			if m := goTestLine.FindStringSubmatch(l); m != nil {
				set(m[2], map[string]string{"PASS": testPassed, "FAIL": testFailed, "SKIP": testSkipped}[m[1]])
			}
		}
		return st
	}
	pending := ""
	for _, l := range lines {
		l = strings.TrimRight(l, "\r")
		if m := unittestSummary.FindStringSubmatch(l); m != nil {
			set(unittestID(m[2], m[3]), map[string]string{"FAIL": testFailed, "ERROR": testError, "UNEXPECTED SUCCESS": testFailed}[m[1]])
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
		return testPassed
	case s == "FAIL" || s == "unexpected success":
		return testFailed
	case s == "ERROR":
		return testError
	case strings.HasPrefix(s, "skipped"):
		return testSkipped
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
	}
	return 3
}

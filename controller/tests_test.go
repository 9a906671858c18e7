package controller_test

import (
	"maps"
	"strings"
	"testing"

	"github.com/aglrl/agl/controller"
)

// TestParseTests reads real output shapes of Python's unittest -v (3.11
// ids and the older "(module.Class)" form, output printed mid-line, a
// docstring line, the failure summary) and go test -v; a test reported
// twice keeps its worst status, so a tested program cannot print a pass
// over a failure.
func TestParseTests(t *testing.T) {
	cases := []struct {
		name, format, out string
		want              map[string]string
	}{
		{"unittest 3.11", controller.TestsUnittest, `test_add (tests.test_calc.TestCalc.test_add) ... FAIL
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
		{"unittest 3.10 ids", controller.TestsUnittest, "test_add (test_calc.TestCalc) ... ok\n",
			map[string]string{"test_calc.TestCalc.test_add": "passed"}},
		{"output and docstring before the status", controller.TestsUnittest, "test_add (m.C.test_add) ... printed by the test\nok\ntest_doc (m.C.test_doc)\nAdds numbers. ... FAIL\n",
			map[string]string{"m.C.test_add": "passed", "m.C.test_doc": "failed"}},
		{"a printed pass does not hide a failure", controller.TestsUnittest, "test_add (m.C.test_add) ... FAIL\ntest_add (m.C.test_add) ... ok\n",
			map[string]string{"m.C.test_add": "failed"}},
		{"gotest", controller.TestsGo, "=== RUN   TestAdd\n--- FAIL: TestAdd (0.00s)\n=== RUN   TestMul\n--- PASS: TestMul (0.00s)\n    --- PASS: TestMul/neg (0.00s)\n--- SKIP: TestSkip (0.00s)\nFAIL\n",
			map[string]string{"TestAdd": "failed", "TestMul": "passed", "TestMul/neg": "passed", "TestSkip": "skipped"}},
		{"nothing ran", controller.TestsUnittest, "ImportError: no module named calc\n", map[string]string{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := controller.ParseTests(c.format, c.out); !maps.Equal(got, c.want) {
				t.Errorf("got %v\nwant %v", got, c.want)
			}
		})
	}
}

// TestParseRepoTask: a task with "repo" is a repository task; bad fields
// are named.
func TestParseRepoTask(t *testing.T) {
	cases := []struct{ task, err string }{
		{`{"prompt":"2+2"}`, ""},
		{`"just text"`, ""},
		{`{"repo":"r","test_command":"t","fail_to_pass":["a"]}`, ""},
		{`{"repo":"","test_command":"t","fail_to_pass":["a"]}`, "repo is empty"},
		{`{"repo":"r","fail_to_pass":["a"]}`, "test_command is required"},
		{`{"repo":"r","test_command":"t"}`, "nothing decides the reward"},
		{`{"repo":"r","test_command":"t","fail_to_pass":["a"],"test_format":"junit"}`, `test_format "junit"`},
		{`{"repo":"r","test_command":"t","fail_to_pass":["a"],"hidden_files":["../x"]}`, `hidden file "../x"`},
		{`{"repo":"r","test_command":"t","fail_to_pass":"a"}`, "cannot unmarshal"},
	}
	for _, c := range cases {
		rt, err := controller.ParseRepoTask([]byte(c.task))
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.task, err)
		case c.err != "" && (err == nil || !contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one naming %q", c.task, err, c.err)
		case c.err == "" && (rt != nil) != contains(c.task, `"repo"`):
			t.Errorf("%s: repository task %v", c.task, rt)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

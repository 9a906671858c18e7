package controller_test

import (
	"strings"
	"testing"

	"github.com/aglrl/agl/controller"
)

// TestParseRepoTask: a task with "repo" is a repository task; bad fields
// are named.
func TestParseRepoTask(t *testing.T) {
	cases := []struct{ task, err string }{
		{`{"prompt":"2+2"}`, ""},
		{`"just text"`, ""},
		{`{"repo":"r","test_command":"python3 -m unittest {tests}","fail_to_pass":["a"]}`, ""},
		{`{"repo":"","test_command":"t","fail_to_pass":["a"]}`, "repo is empty"},
		{`{"repo":"r","fail_to_pass":["a"]}`, "test_command is required"},
		{`{"repo":"r","test_command":"python3 -m unittest {tests}"}`, "nothing decides the reward"},
		{`{"repo":"r","test_command":"python3 -m unittest {tests}","fail_to_pass":["a"],"test_format":"junit"}`, `test_format "junit"`},
		{`{"repo":"r","test_command":"python3 -m unittest {tests}","fail_to_pass":["a"],"hidden_files":["../x"]}`, `hidden file "../x"`},
		{`{"repo":"r","test_command":"python3 -m unittest {tests}","fail_to_pass":"a"}`, "cannot unmarshal"},
		{`{"repo":"r","test_command":"pytest {tests}","fail_to_pass":["a"]}`, "test_format unittest runs `python3 -m unittest`"},
		{`{"repo":"r","test_command":"python3 -m unittest2 {tests}","fail_to_pass":["a"]}`, "test_format unittest runs `python3 -m unittest`"},
		{`{"repo":"r","test_command":"cd src && python3 -m  unittest -v {tests}","fail_to_pass":["a"]}`, ""},
		{`{"repo":"r","test_command":"go test -v ./...","test_format":"gotest","fail_to_pass":["a"]}`, "test_format gotest runs `go test -json`"},
		{`{"repo":"r","test_command":"gotest -json ./...","test_format":"gotest","fail_to_pass":["a"]}`, "test_format gotest runs `go test -json`"},
		{`{"repo":"r","test_command":"go test -json ./...","test_format":"gotest","fail_to_pass":["a"]}`, ""},
		{`{"repo":"r","test_command":"cd src && GOFLAGS=-mod=mod go test -json -short ./...","test_format":"gotest","fail_to_pass":["a"]}`, ""},
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

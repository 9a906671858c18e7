package controller_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aglrl/agl/store"
)

// alAgent is an Agent Lightning agent module: its classes dump the AL
// environment they got to the file AGL_TEST_OUT names (an env_map entry).
const alAgent = `import asyncio, json, os

KEYS = ["AGL_KEY", "AGL_OPENAI_BASE_URL", "AGL_EVENT_URL", "AGL_TEST_OUT", "WHOLE", "NUM", "NESTED", "LIST0", "LITERAL", "AGL_ADMIN_KEY"]

def dump():
    with open(os.environ["AGL_TEST_OUT"], "w") as f:
        json.dump({k: os.environ.get(k) for k in KEYS}, f)

class SyncAgent:
    def run(self):
        dump()

class AsyncAgent:
    async def run(self):
        await asyncio.sleep(0)
        dump()

class Failing:
    def run(self):
        dump()
        raise RuntimeError("agent failed on purpose")

not_a_class = 3
`

// TestALRollouts: AL rollouts run AL's worker on the agent class with AL's
// environment (a scoped AGL_KEY, AL's URLs, env_map resolved as AL does);
// a plain rollout without a command, an unknown env_map path, a missing
// class and a raising agent fail with a message saying why.
func TestALRollouts(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no python3")
	}
	e := newEnv(t, -1)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "alagent.py"), []byte(alAgent), 0o644); err != nil {
		t.Fatal(err)
	}
	envMap := `{"AGL_TEST_OUT":"input.out","WHOLE":"input","NUM":"input.n","NESTED":"input.obj","LIST0":"input.list.0","LITERAL":"plain text"}`
	cases := []struct {
		name, class, envMap string
		plain               bool
		mode                store.Mode
		status              store.RolloutStatus
		errHas              string
		dumped              bool
	}{
		{name: "sync", class: "alagent:SyncAgent", envMap: envMap, mode: store.ModeTrain, status: store.RolloutSucceeded, dumped: true},
		{name: "async dotted", class: "alagent.AsyncAgent", envMap: envMap, mode: store.ModeVal, status: store.RolloutSucceeded, dumped: true},
		{name: "raises", class: "alagent:Failing", envMap: envMap, mode: store.ModeTrain, status: store.RolloutFailed, errHas: "agent failed on purpose", dumped: true},
		{name: "not a class", class: "alagent:not_a_class", envMap: envMap, mode: store.ModeTrain, status: store.RolloutFailed, errHas: "is not a class"},
		{name: "bad env_map path", class: "alagent:SyncAgent", envMap: `{"X":"input.nope"}`, mode: store.ModeTrain, status: store.RolloutFailed, errHas: "local.env_map path not found: input.nope"},
		{name: "plain rollout, no command", plain: true, mode: store.ModeTrain, status: store.RolloutFailed, errHas: "no harness command"},
	}
	var ids []string
	outs := map[string]string{}
	for i, tc := range cases {
		out := filepath.Join(dir, "out-"+strings.ReplaceAll(tc.name, " ", "-")+".json")
		task, _ := json.Marshal(map[string]any{"out": out, "n": 7, "obj": map[string]any{"b": []int{1, 2}, "a": "é"}, "list": []string{"first"}, "i": i})
		nr := store.NewRollout{Task: task, Mode: tc.mode}
		if !tc.plain {
			nr.Metadata = json.RawMessage(`{"batch_idx":1,"_al":{"config":{"timeout_seconds":60,"local":{"agent_class":"` + tc.class + `","env_map":` + tc.envMap + `},"k8s":null}}}`)
		}
		rs, err := e.st.CreateRollouts(context.Background(), []store.NewRollout{nr})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rs[0].ID)
		outs[rs[0].ID] = out
	}
	cfg := e.config()
	cfg.Dir = dir
	cfg.Concurrency = 3
	start(t, cfg)
	rs := e.wait(t, ids, 60*time.Second)
	for i, tc := range cases {
		r := rs[i]
		t.Run(tc.name, func(t *testing.T) {
			if r.Status != tc.status || !strings.Contains(r.Error, tc.errHas) {
				t.Fatalf("rollout %s %q, want %s with %q", r.Status, r.Error, tc.status, tc.errHas)
			}
			b, err := os.ReadFile(outs[r.ID])
			if !tc.dumped {
				if err == nil {
					t.Fatalf("agent ran: %s", b)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]*string
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			mode := "train"
			if tc.mode == store.ModeVal {
				mode = "val"
			}
			want := map[string]string{
				"AGL_OPENAI_BASE_URL": e.srv.URL + "/al/proxy/rollout/" + r.ID + "/attempt/0/mode/" + mode + "/openai/v1",
				"AGL_EVENT_URL":       e.srv.URL + "/al/api/rollouts/" + r.ID + "/attempt/0/events",
				"AGL_TEST_OUT":        outs[r.ID],
				"WHOLE":               `{"i": ` + itoa(i) + `, "list": ["first"], "n": 7, "obj": {"a": "é", "b": [1, 2]}, "out": "` + outs[r.ID] + `"}`,
				"NUM":                 "7",
				"NESTED":              `{"a": "é", "b": [1, 2]}`,
				"LIST0":               "first",
				"LITERAL":             "plain text",
			}
			for k, v := range want {
				if got[k] == nil || *got[k] != v {
					t.Errorf("%s = %v, want %q", k, deref(got[k]), v)
				}
			}
			if got["AGL_ADMIN_KEY"] != nil {
				t.Error("the agent got AGL_ADMIN_KEY")
			}
			if k := deref(got["AGL_KEY"]); !strings.HasPrefix(k, store.KeyPrefix) || k == adminKey {
				t.Errorf("AGL_KEY = %q, want the attempt's scoped key", k)
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return "<unset>"
	}
	return *s
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

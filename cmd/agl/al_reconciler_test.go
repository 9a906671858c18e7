package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aglrl/agl/internal/testutil"
)

// alWorker does what AL's _run_local_reconciler_worker does
// (agentlightning/controller/local_reconciler.py lines 30-45 at v1.0.0,
// commit 8f8b8f95): import "module:Class" (or "module.Class"), instantiate,
// run(), await a coroutine; exit 0, or 1 after printing the traceback.
const alWorker = `import asyncio, importlib, inspect, sys, traceback
try:
    path = sys.argv[1]
    mod, _, cls = path.partition(":") if ":" in path else path.rpartition(".")
    loaded = getattr(importlib.import_module(mod), cls)
    result = loaded().run()
    if inspect.isawaitable(result):
        asyncio.run(result)
except Exception:
    traceback.print_exc()
    sys.exit(1)
`

// TestALLocalReconcilerDrives: AL's LocalReconciler, played request for
// request against agl gateway (no agl controller), drives a train and a val
// round end to end. Each tick (_reconcile_once, lines 128-166): GET
// /api/rollouts?state_in=queuing&state_in=running&limit=50; for a queuing
// rollout, spawn the worker with AL's environment — AGL_KEY the server key,
// AGL_OPENAI_BASE_URL and AGL_EVENT_URL on attempt "0", env_map resolved
// (_spawn_for, lines 197-245) — and PATCH {"state":"running",
// "last_attempt_id":"0"}; for an exited process, PATCH succeeded with
// last_attempt_id, or failed with "subprocess exited with code N"
// (_finish_proc, lines 168-179). The agent's calls and reward land on
// the external attempt; the trainer's reads (terminal cursor, triplets)
// see both rounds with AL's temperatures (train 1, val 0.7).
func TestALLocalReconcilerDrives(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary and Python agents")
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	bin, err := buildAgl()
	if err != nil {
		t.Fatal(err)
	}
	up := newALUpstream(t)
	dataDir, addr, agentDir := t.TempDir(), testutil.FreeAddr(t), t.TempDir()
	if err := os.WriteFile(filepath.Join(agentDir, "replay_agent.py"), []byte(alAgentPy), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dataDir, "agl.yaml")
	yml := "al:\n  model_name: m\nengine:\n  upstream:\n    models:\n      - name: m\n        endpoints: [\"" + up.srv.URL + "/v1\"]\n"
	if err := os.WriteFile(cfgPath, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	gw := startGateway(t, bin, dataDir, addr, "--config", cfgPath)
	defer func() { gw.Process.Signal(syscall.SIGTERM); gw.Wait() }()
	base := "http://" + addr + "/al"
	c := &alClient{t: t, base: base, key: "crash-key", hc: &http.Client{Timeout: 30 * time.Second}}
	c.want(c.do("POST", "/api/models", []map[string]any{{"model": "m", "endpoint": up.srv.URL + "/v1"}}), 201, nil)
	cfg := map[string]any{"timeout_seconds": 120, "local": map[string]any{"agent_class": "replay_agent:Agent",
		"env_map": map[string]any{"PROMPTS": "input.prompts", "REWARD": "input.reward"}}}
	c.want(c.do("POST", "/api/rollouts", []map[string]any{
		{"rollout_id": "train-0", "input": map[string]any{"data_id": "d0", "prompts": []string{"one", "two"}, "reward": 0.75}, "is_train": true, "config": cfg},
		{"rollout_id": "val-0", "input": map[string]any{"data_id": "d1", "prompts": []string{"check"}, "reward": 0.5}, "is_train": false, "config": cfg},
		{"rollout_id": "broken", "input": map[string]any{"data_id": "d2", "prompts": []string{}, "reward": "NaN-not-a-float"}, "is_train": true, "config": cfg},
	}), 201, nil)

	type proc struct {
		cmd  *exec.Cmd
		done chan struct{}
		out  strings.Builder
	}
	procs := map[string]*proc{}
	finished := map[string]bool{}
	deadline := time.Now().Add(90 * time.Second)
	for len(finished) < 3 {
		if time.Now().After(deadline) {
			for id, p := range procs {
				t.Logf("%s output:\n%s", id, p.out.String())
			}
			t.Fatalf("rounds not done: finished %v", finished)
		}
		var rs []map[string]any
		c.want(c.do("GET", "/api/rollouts?state_in=queuing&state_in=running&limit=50", nil), 200, &rs)
		for _, ro := range rs {
			id := ro["rollout_id"].(string)
			st := ro["status"].(map[string]any)["state"]
			p := procs[id]
			switch {
			case p == nil && st == "queuing":
				mode := "val"
				if ro["is_train"] == true {
					mode = "train"
				}
				in := ro["input"].(map[string]any)
				prompts, _ := json.Marshal(in["prompts"])
				cmd := exec.Command(python, "-c", alWorker, "replay_agent:Agent")
				cmd.Dir = agentDir
				cmd.Env = append(os.Environ(), "PYTHONPATH="+agentDir, "AGL_KEY=crash-key",
					"AGL_OPENAI_BASE_URL="+base+"/proxy/rollout/"+id+"/attempt/0/mode/"+mode+"/openai/v1",
					"AGL_EVENT_URL="+base+"/api/rollouts/"+id+"/attempt/0/events",
					"PROMPTS="+string(prompts), "REWARD="+fmt.Sprint(in["reward"]))
				p = &proc{cmd: cmd, done: make(chan struct{})}
				cmd.Stdout, cmd.Stderr = &p.out, &p.out
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				go func() { cmd.Wait(); close(p.done) }()
				procs[id] = p
				var patched map[string]any
				c.want(c.do("PATCH", "/api/rollouts/"+id, map[string]any{"status": map[string]any{"state": "running", "last_attempt_id": "0"}}), 200, &patched)
				if s := patched["status"].(map[string]any); s["state"] != "running" || s["last_attempt_id"] != "0" {
					t.Fatalf("spawn PATCH of %s: %v", id, s)
				}
			case p != nil:
				select {
				case <-p.done:
				default:
					continue
				}
				body := map[string]any{"state": "succeeded", "last_attempt_id": "0"}
				if code := p.cmd.ProcessState.ExitCode(); code != 0 {
					body = map[string]any{"state": "failed", "error_message": fmt.Sprintf("subprocess exited with code %d", code)}
				}
				c.want(c.do("PATCH", "/api/rollouts/"+id, map[string]any{"status": body}), 200, nil)
				finished[id] = true
			}
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The trainer's side: the terminal cursor, then each rollout's events.
	var page struct {
		Items []map[string]any `json:"items"`
		Total int              `json:"total_terminal"`
	}
	c.want(c.do("GET", "/api/rollouts/terminal?after=0", nil), 200, &page)
	states := map[string]any{}
	for _, it := range page.Items {
		states[it["rollout_id"].(string)] = it["state"]
	}
	if page.Total != 3 || states["train-0"] != "succeeded" || states["val-0"] != "succeeded" || states["broken"] != "failed" {
		for id, p := range procs {
			t.Logf("%s output:\n%s", id, p.out.String())
		}
		t.Fatalf("terminal page %+v", page)
	}
	var broken map[string]any
	c.want(c.do("GET", "/api/rollouts/broken", nil), 200, &broken)
	if s := broken["rollout"].(map[string]any)["status"].(map[string]any); s["error_message"] != "subprocess exited with code 1" {
		t.Fatalf("failed rollout status %v", s)
	}
	for _, r := range []struct {
		id     string
		calls  int
		temp   float64
		reward float64
	}{{"train-0", 2, 1, 0.75}, {"val-0", 1, 0.7, 0.5}} {
		var trip []map[string]any
		c.want(c.do("GET", "/api/rollouts/"+r.id+"/events?format=triplet", nil), 200, &trip)
		calls := 0
		var reward any
		for _, ev := range trip {
			d := ev["data"].(map[string]any)
			switch ev["event_type"] {
			case "model_request":
				calls++
				uc, ok := up.byResponse(d["response_token_ids"].([]any))
				if !ok || uc.Temperature != r.temp || fmt.Sprint(d["prompt_token_ids"]) != fmt.Sprint(toAny(uc.Prompt)) {
					t.Fatalf("%s triplet %v: upstream call %+v (found %v), want temperature %v", r.id, d, uc, ok, r.temp)
				}
			case "reward":
				reward = d["value"]
			}
		}
		if calls != r.calls || reward != r.reward {
			t.Fatalf("%s: %d calls, reward %v; want %d, %v: %v", r.id, calls, reward, r.calls, r.reward, trip)
		}
	}
}

//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/store"
)

// authorityGateway runs a real `agl gateway` (admin key "crash-key",
// max_abs_reward 1000) with an upstream engine configured, so that the
// /r/… routes are served; the upstream is never called.
func authorityGateway(t *testing.T) (bin, url string, c *api.Client) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin, err := buildAgl()
	if err != nil {
		t.Fatal(err)
	}
	dataDir, addr := t.TempDir(), testutil.FreeAddr(t)
	cfg := upstreamConfig(t, dataDir, "gateway:\n  max_abs_reward: 1000\n")
	gw := startGateway(t, bin, dataDir, addr, "--config", cfg)
	t.Cleanup(func() { gw.Process.Signal(syscall.SIGTERM); gw.Wait() })
	url = "http://" + addr
	return bin, url, api.NewClient(url, "crash-key")
}

func postJSON(t *testing.T, url, key, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestEventAuthority: against a real gateway, a scoped key may append only
// harness event types, on both event routes; forged gateway-owned events
// and reward sources get 403, bad rewards 400 naming the field, and
// nothing refused is stored.
func TestEventAuthority(t *testing.T) {
	_, url, c := authorityGateway(t)
	ctx := context.Background()
	if _, err := c.CreateRollouts(ctx, []store.NewRollout{{ID: "auth", Config: store.RolloutConfig{UnresponsiveSeconds: 3600}}}); err != nil {
		t.Fatal(err)
	}
	cl, ok, err := c.Claim(ctx, store.ClaimRequest{WorkerID: "t"})
	if err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	routes := map[string]string{
		"api": url + "/api/rollouts/auth/attempts/" + cl.Attempt.ID + "/events",
		"r":   url + "/r/auth/" + cl.Attempt.ID + "/events",
	}
	cases := []struct {
		name   string
		key    string
		event  string // one event object
		status int
		field  string // named in the error
	}{
		{"forged model_request", cl.Key, `{"type":"model_request","data":{"call_id":"x","prompt_ids":[1],"response_ids":[2],"response_logprobs":[-0.1]}}`, 403, "events[0].type"},
		{"forged span", cl.Key, `{"type":"span","data":{}}`, 403, "events[0].type"},
		{"forged evaluator reward", cl.Key, `{"type":"reward","data":{"value":1,"source":"evaluator"}}`, 403, "events[0].data.source"},
		{"overflowing reward", cl.Key, `{"type":"reward","data":{"value":1.7e308}}`, 400, "events[0].data.value"},
		{"overflowing bare reward", cl.Key, `{"type":"reward","data":1.7e308}`, 400, "events[0].data"},
		{"boolean reward", cl.Key, `{"type":"reward","data":{"value":true}}`, 400, "events[0].data.value"},
		{"string reward", cl.Key, `{"type":"reward","data":{"value":"1"}}`, 400, "events[0].data.value"},
		{"null reward", cl.Key, `{"type":"reward","data":null}`, 400, "events[0].data"},
		{"string dimension", cl.Key, `{"type":"reward","data":{"values":{"a":"x"}}}`, 400, "events[0].data.values.a"},
		{"admin: overflowing reward", "crash-key", `{"type":"reward","data":{"value":1.7e308}}`, 400, "events[0].data.value"},
		{"reward past the configured bound", cl.Key, `{"type":"reward","data":{"value":-1000.5}}`, 400, "events[0].data.value"},
		{"reward at the configured bound", cl.Key, `{"type":"reward","data":{"value":-1000}}`, 200, ""},
		{"reward", cl.Key, `{"type":"reward","data":{"value":0.5}}`, 200, ""},
		{"log", cl.Key, `{"type":"log","data":"hi"}`, 200, ""},
		{"custom", cl.Key, `{"type":"my.metric","data":3}`, 200, ""},
	}
	want := 0 // events that should be stored
	for _, route := range []string{"api", "r"} {
		for _, tc := range cases {
			t.Run(route+"/"+tc.name, func(t *testing.T) {
				body := `{"events":[` + tc.event + `]}`
				if tc.key != cl.Key && route == "r" {
					t.Skip("the /r/ route takes scoped keys only")
				}
				st, resp := postJSON(t, routes[route], tc.key, body)
				if st != tc.status {
					t.Fatalf("%d %s, want %d", st, resp, tc.status)
				}
				if st == 200 {
					want++
					return
				}
				if !strings.Contains(resp, tc.field) {
					t.Errorf("error does not name %s: %s", tc.field, resp)
				}
				var eb struct {
					Error struct{ Code, Message string }
				}
				if json.Unmarshal([]byte(resp), &eb) != nil || eb.Error.Message == "" {
					t.Errorf("not an error object: %s", resp)
				}
			})
		}
	}
	evs, err := c.ListEvents(ctx, store.EventFilter{RolloutID: "auth"})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != want {
		t.Fatalf("%d events stored, want the %d accepted", len(evs), want)
	}
	for _, e := range evs {
		if store.GatewayOwned(e.Type) || strings.Contains(string(e.Data), "1.7e308") || strings.Contains(string(e.Data), "source") {
			t.Errorf("refused event stored: %s %s", e.Type, e.Data)
		}
	}
}

// detachedHarness spawns a child in a new session (setsid) that posts
// {"value":1} in a loop with the attempt's key — half of them with
// AGL_ATTEMPT_ID scrubbed from their environment — records the child's
// pid in $PIDS_DIR/<attempt>, and exits 0 after the child has started
// posting. It also writes 1 to the reward file.
const detachedHarness = `import json, os, subprocess, sys, time, urllib.request
if sys.argv[1:] == ["child"]:
    req = lambda: urllib.request.Request(os.environ["AGL_EVENTS_URL"], data=b'{"type":"reward","data":{"value":1}}',
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"}, method="POST")
    while True:
        try:
            urllib.request.urlopen(req(), timeout=5).read()
            open(os.environ["POSTED"], "a").write("1\n")
        except Exception:
            pass
        time.sleep(0.002)
env = dict(os.environ)
env["POSTED"] = os.path.join(os.environ["PIDS_DIR"], os.environ["AGL_ATTEMPT_ID"] + ".posted")
if json.loads(os.environ["AGL_TASK"])["scrub"]:
    del env["AGL_ATTEMPT_ID"]
p = subprocess.Popen([sys.executable, __file__, "child"], env=env, start_new_session=True,
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
open(os.path.join(os.environ["PIDS_DIR"], os.environ["AGL_ATTEMPT_ID"]), "w").write(str(p.pid))
open(os.environ["AGL_REWARD_FILE"], "w").write("1")
deadline = time.time() + 3
while time.time() < deadline and not os.path.exists(env["POSTED"]):
    time.sleep(0.01)
`

// runController runs a real `agl controller` until the rollouts are
// terminal, then stops it; it returns them.
func runAglController(t *testing.T, bin, url string, c *api.Client, ids []string, args ...string) []store.Rollout {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"controller", "--gateway", url, "--poll", "50ms", "-v"}, args...)...)
	cmd.Env = append(os.Environ(), "AGL_ADMIN_KEY=crash-key")
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("controller output:\n%s", logs.String())
		}
	}()
	ctx := context.Background()
	deadline := time.Now().Add(90 * time.Second)
	for {
		var out []store.Rollout
		for _, id := range ids {
			r, err := c.GetRollout(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != store.RolloutSucceeded && r.Status != store.RolloutFailed && r.Status != store.RolloutCancelled {
				break
			}
			out = append(out, r)
		}
		if len(out) == len(ids) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d rollouts terminal after 90s", len(out), len(ids))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func createTasks(t *testing.T, c *api.Client, prefix string, n int, task func(i int) string) []string {
	t.Helper()
	var rs []store.NewRollout
	var ids []string
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		ids = append(ids, id)
		rs = append(rs, store.NewRollout{ID: id, Task: json.RawMessage(task(i)), Config: store.RolloutConfig{UnresponsiveSeconds: 3600}})
	}
	if _, err := c.CreateRollouts(context.Background(), rs); err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestDetachedChildRewardRace: with reward_source evaluator, a harness
// whose setsid child keeps posting {"value":1} with the attempt's key (and
// which also writes 1 to its reward file) gets the evaluator's 0 in 20 of
// 20 rollouts, and every such child is dead once its rollout is done.
func TestDetachedChildRewardRace(t *testing.T) {
	bin, url, c := authorityGateway(t)
	dir := t.TempDir()
	harness := filepath.Join(dir, "harness.py")
	if err := os.WriteFile(harness, []byte(detachedHarness), 0o644); err != nil {
		t.Fatal(err)
	}
	// Should the controller miss one, no child outlives the test.
	t.Cleanup(func() {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if b, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil && !strings.HasSuffix(e.Name(), ".posted") {
				if pid, err := strconv.Atoi(string(b)); err == nil && pid > 1 {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	})
	const n = 20
	ids := createTasks(t, c, "race", n, func(i int) string { return fmt.Sprintf(`{"scrub":%v}`, i%2 == 1) })
	rs := runAglController(t, bin, url, c, ids, "--concurrency", "4", "--evaluator", "echo 0", "--reward-source", "evaluator",
		"--env", "PIDS_DIR="+dir, "--", "python3", harness)
	zero, posted := 0, 0
	for _, r := range rs {
		if r.Status != store.RolloutSucceeded {
			t.Errorf("%s: %s (%s)", r.ID, r.Status, r.Error)
			continue
		}
		if r.Reward != nil && *r.Reward == 0 {
			zero++
		} else {
			t.Errorf("%s: reward %s, want the evaluator's 0", r.ID, fmtReward(r.Reward))
		}
		aid := r.Attempts[len(r.Attempts)-1].ID
		b, err := os.ReadFile(filepath.Join(dir, aid))
		if err != nil {
			t.Fatalf("%s: the harness recorded no child: %v", r.ID, err)
		}
		pid, _ := strconv.Atoi(string(b))
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s: the detached child %d is still alive (%v)", r.ID, pid, err)
		}
		if _, err := os.Stat(filepath.Join(dir, aid+".posted")); err == nil {
			posted++
		}
		// The harness's rewards are there as diagnostics, not used.
		evs, err := c.ListEvents(context.Background(), store.EventFilter{RolloutID: r.ID, AttemptID: aid})
		if err != nil {
			t.Fatal(err)
		}
		var file bool
		for _, e := range evs {
			file = file || e.Type == "harness_reward"
		}
		if !file {
			t.Errorf("%s: no harness_reward diagnostic for the reward file", r.ID)
		}
	}
	t.Logf("reward 0 in %d of %d rollouts; in %d the detached child had a reward 1 accepted before the harness exited", zero, n, posted)
	if posted == 0 {
		t.Error("no child ever posted: the race was not exercised")
	}
}

func fmtReward(f *float64) string {
	if f == nil {
		return "none"
	}
	return strconv.FormatFloat(*f, 'g', -1, 64)
}

// TestRewardSourceTable: reward files, reward events and per-call rewards
// against the configured source, through real gateway and controller
// processes; keys never reach the stored logs.
func TestRewardSourceTable(t *testing.T) {
	bin, url, c := authorityGateway(t)
	post := `python3 -c 'import os, sys, urllib.request; urllib.request.urlopen(urllib.request.Request(os.environ["AGL_EVENTS_URL"], data=sys.argv[1].encode(), headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]}, method="POST")).read()' `
	cases := []struct {
		name    string
		harness string
		args    []string
		want    *float64
	}{
		{"evaluator: reward file ignored", `echo 1 > "$AGL_REWARD_FILE"`, []string{"--evaluator", "echo 0"}, ptrF(0)},
		{"evaluator: reward event ignored", post + `'{"type":"reward","data":{"value":1}}'`, []string{"--evaluator", "echo 0"}, ptrF(0)},
		{"both: reward event used", post + `'{"type":"reward","data":{"value":1}}'`, []string{"--evaluator", "echo 0", "--reward-source", "both"}, ptrF(1)},
		{"both: per-call reward does not switch the evaluator off", post + `'{"type":"reward","data":{"value":1,"call_id":"c1"}}'`, []string{"--evaluator", "echo 0.5", "--reward-source", "both"}, ptrF(0.5)},
		{"evaluator: per-call reward does not switch it off", post + `'{"type":"reward","data":{"value":1,"call_id":"c1"}}'`, []string{"--evaluator", "echo 0.5"}, ptrF(0.5)},
		{"harness: reward file wins over a later event", `echo 0.25 > "$AGL_REWARD_FILE"; ` + post + `'{"type":"reward","data":{"value":1}}'`, nil, ptrF(0.25)},
		{"harness: overflowing reward file fails the attempt", `echo 1.7e308 > "$AGL_REWARD_FILE"`, nil, nil},
		{"key redaction", `env; env >&2; echo 1 > "$AGL_REWARD_FILE"`, nil, ptrF(1)},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ids := createTasks(t, c, fmt.Sprint("src", i), 1, func(int) string { return `{}` })
			args := append(append([]string{}, tc.args...), "--", "sh", "-c", tc.harness)
			r := runAglController(t, bin, url, c, ids, args...)[0]
			switch {
			case tc.want == nil:
				if r.Status != store.RolloutFailed || !strings.Contains(r.Error, "out of range") {
					t.Errorf("rollout %s (%s), want failed: out of range", r.Status, r.Error)
				}
				return
			case r.Status != store.RolloutSucceeded:
				t.Fatalf("rollout %s: %s", r.Status, r.Error)
			case r.Reward == nil || *r.Reward != *tc.want:
				t.Errorf("reward %s, want %v", fmtReward(r.Reward), *tc.want)
			}
			evs, err := c.ListEvents(context.Background(), store.EventFilter{RolloutID: r.ID})
			if err != nil {
				t.Fatal(err)
			}
			logs := 0
			for _, e := range evs {
				if strings.Contains(string(e.Data), store.KeyPrefix) || strings.Contains(string(e.Data), "crash-key") {
					t.Errorf("%s event holds a key: %s", e.Type, e.Data)
				}
				if e.Type == store.EventLog && strings.Contains(string(e.Data), "OPENAI_API_KEY=[REDACTED]") {
					logs++
				}
			}
			if tc.name == "key redaction" && logs != 2 {
				t.Errorf("%d log events show the redacted key, want 2 (stdout, stderr)", logs)
			}
		})
	}
}

func ptrF(f float64) *float64 { return &f }

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/store"
)

// callingGateway starts `agl gateway` on dataDir with a vLLM-format
// upstream, claims n rollouts, and returns the claims and the config path.
func callingGateway(t *testing.T, bin, dataDir, addr string, n int) (*exec.Cmd, []store.Claim, string) {
	t.Helper()
	cfg := upstreamConfig(t, t.TempDir(), "")
	gw := startGateway(t, bin, dataDir, addr, "--config", cfg)
	c := api.NewClient("http://"+addr, "crash-key")
	ctx := context.Background()
	var rs []store.NewRollout
	for h := range n {
		rs = append(rs, store.NewRollout{ID: fmt.Sprint("calls-", h), Config: store.RolloutConfig{UnresponsiveSeconds: 3600}})
	}
	if _, err := c.CreateRollouts(ctx, rs); err != nil {
		t.Fatal(err)
	}
	claims := make([]store.Claim, n)
	for h := range claims {
		cl, ok, err := c.Claim(ctx, store.ClaimRequest{WorkerID: "w"})
		if err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		claims[h] = cl
	}
	return gw, claims, cfg
}

// makeCalls makes model calls for each claim until stop is closed or the
// gateway fails, and returns the call ids answered 200, per claim.
func makeCalls(addr string, claims []store.Claim, stop <-chan struct{}) func() [][]string {
	acked := make([][]string, len(claims))
	hc := &http.Client{Timeout: 10 * time.Second}
	var wg sync.WaitGroup
	for h, cl := range claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			url := "http://" + addr + "/r/" + cl.Rollout.ID + "/" + cl.Attempt.ID + "/v1/chat/completions"
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("POST", url, strings.NewReader(fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"call %d"}]}`, k)))
				req.Header.Set("Authorization", "Bearer "+cl.Key)
				resp, err := hc.Do(req)
				if err != nil {
					return
				}
				var out struct{ ID string }
				err = json.NewDecoder(resp.Body).Decode(&out)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || err != nil {
					return
				}
				acked[h] = append(acked[h], out.ID)
			}
		}()
	}
	return func() [][]string { wg.Wait(); return acked }
}

// checkCalls asserts that each claim's model_request events are its acked
// calls in order, each once, then at most the one in flight at a kill.
func checkCalls(t *testing.T, c *api.Client, claims []store.Claim, acked [][]string) int {
	t.Helper()
	total := 0
	for h, cl := range claims {
		evs, err := c.ListEvents(context.Background(), store.EventFilter{RolloutID: cl.Rollout.ID, Types: []string{store.EventModelRequest}})
		if err != nil {
			t.Fatal(err)
		}
		if len(acked[h]) == 0 {
			t.Fatalf("harness %d got no 200", h)
		}
		if len(evs) < len(acked[h]) || len(evs) > len(acked[h])+1 {
			t.Fatalf("harness %d: %d calls acked, %d recorded", h, len(acked[h]), len(evs))
		}
		seen := map[string]bool{}
		for k, e := range evs {
			var mc api.ModelCall
			if err := json.Unmarshal(e.Data, &mc); err != nil {
				t.Fatal(err)
			}
			if seen[mc.CallID] {
				t.Fatalf("harness %d: call %s stored twice", h, mc.CallID)
			}
			seen[mc.CallID] = true
			if k < len(acked[h]) && mc.CallID != acked[h][k] {
				t.Fatalf("harness %d: event %d records call %s, acked call %d was %s", h, k, mc.CallID, k, acked[h][k])
			}
		}
		total += len(acked[h])
	}
	return total
}

// aglRun runs the agl binary and returns its exit error, stdout and stderr.
func aglRun(bin string, args ...string) (stdout, stderr string, err error) {
	var out, errb bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// TestExportBesideLiveGateway: `agl export` on the data dir of a running
// gateway (recording model calls) reads the database read-only and leaves
// the gateway's journal alone; a second gateway or a recovery on the same
// data dir is refused, naming the dir and the holder's pid; after a
// SIGKILL the gateway restarts and holds every acked call exactly once.
func TestExportBesideLiveGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin, err := buildAgl()
	if err != nil {
		t.Fatal(err)
	}
	dataDir, addr := t.TempDir(), testutil.FreeAddr(t)
	gw, claims, cfg := callingGateway(t, bin, dataDir, addr, 4)
	stop := make(chan struct{})
	wait := makeCalls(addr, claims, stop)

	time.Sleep(300 * time.Millisecond)
	for i := range 5 {
		out := filepath.Join(t.TempDir(), "s.jsonl")
		stdout, stderr, err := aglRun(bin, "export", "--data-dir", dataDir, "--out", out)
		if err != nil {
			t.Fatalf("export %d beside the gateway: %v\n%s", i, err, stderr)
		}
		if !strings.Contains(stdout, `"next_cursor"`) {
			t.Fatalf("export %d: no summary: %q", i, stdout)
		}
		if stderr != "" {
			t.Logf("export %d stderr: %s", i, stderr)
		}
	}
	for _, args := range [][]string{
		{"gateway", "--data-dir", dataDir, "--listen", testutil.FreeAddr(t)},
		{"store", "recover", "--data-dir", dataDir},
	} {
		_, stderr, err := aglRun(bin, args...)
		if err == nil {
			t.Fatalf("%s beside a running gateway succeeded", args[0])
		}
		for _, want := range []string{dataDir, fmt.Sprintf("pid %d", gw.Process.Pid), "in use"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("%s refusal %q does not name %q", args[0], stderr, want)
			}
		}
		if n := strings.Count(strings.TrimSpace(stderr), "\n"); n > 0 {
			t.Errorf("%s refusal is %d lines: %q", args[0], n+1, stderr)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if err := gw.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	gw.Wait()
	close(stop)
	acked := wait()
	// A reader of the dead gateway's data dir says what it cannot see.
	if _, stderr, err := aglRun(bin, "export", "--data-dir", dataDir, "--out", filepath.Join(t.TempDir(), "s.jsonl")); err != nil {
		t.Fatalf("export after the kill: %v\n%s", err, stderr)
	} else if stderr != "" && !strings.Contains(stderr, "read-only") {
		t.Errorf("export stderr: %q", stderr)
	}

	gw2 := startGateway(t, bin, dataDir, addr, "--config", cfg)
	defer func() { gw2.Process.Signal(syscall.SIGTERM); gw2.Wait() }()
	n := checkCalls(t, api.NewClient("http://"+addr, "crash-key"), claims, acked)
	t.Logf("%d acked calls, each stored once, after 5 exports beside the gateway and a restart", n)
}

// TestStoreRecover: a gateway killed while recording, whose journal
// header is then overwritten, refuses to start with a one-line message
// naming the file, the offset and `agl store recover`; the recovery
// reports what it did, and the gateway then starts with every acked call.
func TestStoreRecover(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin, err := buildAgl()
	if err != nil {
		t.Fatal(err)
	}
	dataDir, addr := t.TempDir(), testutil.FreeAddr(t)
	gw, claims, cfg := callingGateway(t, bin, dataDir, addr, 4)
	stop := make(chan struct{})
	wait := makeCalls(addr, claims, stop)
	time.Sleep(time.Second)
	gw.Process.Signal(syscall.SIGKILL)
	gw.Wait()
	close(stop)
	acked := wait()

	journal := filepath.Join(dataDir, "agl.db-events")
	b, err := os.ReadFile(journal)
	if err != nil {
		t.Fatal(err)
	}
	copy(b, "overwritten!")
	if err := os.WriteFile(journal, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := aglRun(bin, "gateway", "--data-dir", dataDir, "--listen", testutil.FreeAddr(t), "--config", cfg)
	if err == nil {
		t.Fatal("gateway started on a damaged journal")
	}
	for _, want := range []string{journal, "offset 0", "agl store recover --data-dir " + dataDir} {
		if !strings.Contains(stderr, want) {
			t.Errorf("refusal %q does not name %q", stderr, want)
		}
	}
	stdout, stderr, err := aglRun(bin, "store", "recover", "--data-dir", dataDir)
	if err != nil {
		t.Fatalf("recover: %v\n%s", err, stderr)
	}
	for _, want := range []string{"replayed", "header was damaged", "the data dir opens again"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("recovery report %q lacks %q", stdout, want)
		}
	}
	t.Logf("recovery report:\n%s", stdout)
	gw2 := startGateway(t, bin, dataDir, addr, "--config", cfg)
	defer func() { gw2.Process.Signal(syscall.SIGTERM); gw2.Wait() }()
	n := checkCalls(t, api.NewClient("http://"+addr, "crash-key"), claims, acked)
	t.Logf("all %d acked calls present, each once, after a SIGKILL, an overwritten journal header and a recovery", n)
}

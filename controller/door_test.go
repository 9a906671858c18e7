//go:build linux

package controller_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aglrl/agl/controller"
	"github.com/aglrl/agl/gateway"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/sandbox"
	"github.com/aglrl/agl/store"
)

// TestDoorFlood: a client of one inside harness's gateway door opens
// 1,500 slow model requests (headers, then a body that never comes). The
// door holds at most sandbox.door_conns of them and passes at most
// sandbox.door_requests to the gateway; the rest are refused at once in
// the JSON error shape and counted in the sandbox event. The gateway
// (real listener, default per-IP connection cap, which the controller
// shares on loopback) keeps answering the admin API, the controller's
// heartbeats keep both attempts alive, and a victim rollout started
// during the flood completes with its reward.
func TestDoorFlood(t *testing.T) {
	testutil.RequireBwrap(t)
	const flood, doorConns, doorRequests = 1500, 64, 16
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // the attempts' dirs, where the doors' sockets are
	e := newEnv(t, time.Hour)

	gwURL := servedGateway(t, e)

	repo := pyRepo(t)
	attacker := e.create(t, 1, store.RolloutConfig{TimeoutSeconds: 120}, repoTask(t, repo, map[string]any{"gateway": gwURL, "sleep_s": 12}))[0]
	cfg := e.repoConfig(t)
	cfg.GatewayURL = gwURL
	cfg.Command = []string{"python3", "inside_harness.py"}
	cfg.Sandbox.Harness = controller.HarnessInside
	cfg.Sandbox.DoorConns, cfg.Sandbox.DoorRequests = doorConns, doorRequests
	cfg.Concurrency = 2
	start(t, cfg)

	sock, prefix, key := attackerDoor(t, tmp, attacker)
	admin := func(label string) time.Duration { return adminP50(t, gwURL, label) }
	idle := admin("idle")

	// The flood: slow model requests on the attacker's own route, with its
	// own key, so that each one passed on holds a gateway connection
	// until the gateway's body timeout.
	head := "POST " + prefix + "v1/chat/completions HTTP/1.1\r\nHost: door\r\nAuthorization: Bearer " + key +
		"\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{"
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range flood {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatalf("dial the door after %d connections: %v", len(conns), err)
		}
		conns = append(conns, c)
		io.WriteString(c, head)
	}
	// What each flood connection got: 503 (no room at the door), 429 (no
	// room in flight) or nothing yet (passed on to the gateway, or held).
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			what := "held"
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				var eb struct {
					Error struct{ Code, Message string }
				}
				body, _ := io.ReadAll(resp.Body)
				if json.Unmarshal(body, &eb) != nil || eb.Error.Code == "" {
					what = fmt.Sprintf("%d without the JSON error shape: %q", resp.StatusCode, body)
				} else {
					what = fmt.Sprintf("%d %s", resp.StatusCode, eb.Error.Code)
				}
			} else if !errors.Is(err, os.ErrDeadlineExceeded) {
				what = "error: " + err.Error()
			}
			mu.Lock()
			got[what]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	t.Logf("the flood's %d connections: %v", flood, got)
	// A connection answered 429 is closed after its answer (its request's
	// body is left unread), which frees its slot for a later dial of the
	// flood: each 429 may let one more in.
	// What never varies: no more than doorConns connections are open at
	// the door at once (those still without an answer now), and every
	// dial beyond the open ones and the 429s was refused.
	refused429 := got["429 too_many_requests"]
	if n := got["503 too_many_connections"]; n < flood-doorConns-refused429 {
		t.Errorf("%d connections refused at the door, want at least %d", n, flood-doorConns-refused429)
	}
	if got["held"] > doorConns {
		t.Errorf("the door holds %d connections without an answer, want at most %d", got["held"], doorConns)
	}
	if got["429 too_many_requests"] == 0 {
		t.Errorf("no request was refused for the in-flight cap")
	}

	flooding := admin("flooding")
	t.Logf("admin API p50 (a new connection each): idle %s, while a sandbox floods its door %s", idle, flooding)

	victim := e.create(t, 1, store.RolloutConfig{TimeoutSeconds: 120}, repoTask(t, repo, map[string]any{"cmds": []string{fixCmd}, "gateway": gwURL}))[0]
	v := e.wait(t, []string{victim}, 2*time.Minute)[0]
	out := logText(t, e.events(t, victim, store.EventLog), "stdout")
	if v.Status != store.RolloutSucceeded || v.Reward == nil || *v.Reward != 1 {
		t.Fatalf("victim rollout %s (%s), reward %s, want succeeded with 1\n%s", v.Status, v.Error, fmtPtr(v.Reward), out)
	}
	// The victim's model call reached the gateway, which answered it (500:
	// this gateway has no engine), not the door (403, 429, 502, 503).
	if !strings.Contains(out, "MODEL 500\n") {
		t.Errorf("the victim's model call did not reach the gateway:\n%s", out)
	}
	stillFlooding := admin("flooding, after the victim")
	for _, c := range conns {
		c.Close()
	}

	a := e.wait(t, []string{attacker}, time.Minute)[0]
	if a.Status != store.RolloutSucceeded || len(a.Attempts) != 1 {
		t.Fatalf("attacker rollout %s (%s) in %d attempts, want succeeded in 1 (heartbeats kept it alive)", a.Status, a.Error, len(a.Attempts))
	}
	var se sandboxEvent
	if e.one(t, attacker, store.EventSandbox, &se) {
		if se.DoorRefusedConns < int64(flood-doorConns-refused429) || se.DoorRefusedRequests == 0 {
			t.Errorf("sandbox event: door refused %d connections and %d requests, want at least %d and 1", se.DoorRefusedConns, se.DoorRefusedRequests, flood-doorConns-refused429)
		}
	}
	t.Logf("admin API p50 once the victim was done, still flooding: %s", stillFlooding)
}

// servedGateway serves the gateway as agl does (its own listener and
// connection caps, no engine) over e's store; it returns its URL.
func servedGateway(t *testing.T, e *env) string {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	gw := gateway.New(gateway.Options{Store: e.st, AdminKey: adminKey, LLM: proxy.New(proxy.Config{}, e.st, nil), Logger: quiet})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gctx, stopGW := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- gw.Serve(gctx, ln, time.Second, nil) }()
	t.Cleanup(func() { stopGW(); <-served })
	return "http://" + ln.Addr().String()
}

// adminP50 is the median time of 30 admin API requests to the gateway at
// gwURL, each on a new connection; any answer but 200 fails the test.
func adminP50(t *testing.T, gwURL, label string) time.Duration {
	t.Helper()
	cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	var ds []time.Duration
	for range 30 {
		req, _ := http.NewRequest(http.MethodGet, gwURL+"/api/rollouts?limit=1", nil)
		req.Header.Set("Authorization", "Bearer "+adminKey)
		began := time.Now()
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatalf("admin API (%s): %v", label, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ds = append(ds, time.Since(began))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("admin API (%s): %d %s", label, resp.StatusCode, body)
		}
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// TestDoorFloodForwarded: TestDoorFlood's flood, from inside a real
// sandbox: the inside harness itself opens 1,000 slow model requests to
// 127.0.0.1:8642, which `agl sandbox forward` relays to its door. The door
// refuses past its caps, the admin API keeps answering (p50 against idle,
// same run), and a victim rollout started during the flood gets its
// reward.
func TestDoorFloodForwarded(t *testing.T) {
	if testing.Short() {
		t.Skip("a soak: a sandbox holds 1,000 connections for about half a minute")
	}
	testutil.RequireBwrap(t)
	const flood, doorConns, doorRequests = 1000, 64, 16
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // the attempts' dirs
	e := newEnv(t, time.Hour)
	gwURL := servedGateway(t, e)
	repo := pyRepo(t)
	attacker := e.create(t, 1, store.RolloutConfig{TimeoutSeconds: 180}, repoTask(t, repo, map[string]any{"gateway": gwURL, "flood_door": flood, "flood_hold_s": 40}))[0]
	cfg := e.repoConfig(t)
	cfg.GatewayURL = gwURL
	cfg.Command = []string{"python3", "inside_harness.py"}
	cfg.Sandbox.Harness = controller.HarnessInside
	cfg.Sandbox.DoorConns, cfg.Sandbox.DoorRequests = doorConns, doorRequests
	cfg.Concurrency = 2
	start(t, cfg)
	idle := adminP50(t, gwURL, "idle")

	// The harness prints what its flood got once it is in place.
	var counts map[string]int
	for deadline := time.Now().Add(60 * time.Second); counts == nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the attacker's harness did not report its flood")
		}
		logs, _ := filepath.Glob(filepath.Join(tmp, "agl-attempt-*", "stdout.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			if _, after, ok := strings.Cut(string(b), "FLOOD "); ok {
				line, _, _ := strings.Cut(after, "\n")
				if err := json.Unmarshal([]byte(line), &counts); err != nil {
					t.Fatalf("FLOOD %s: %v", line, err)
				}
			}
		}
	}
	t.Logf("the flood's %d connections, from inside the sandbox: %v", flood, counts)
	// As in TestDoorFlood: each 429 closes its connection and may let
	// one more dial in; no more than doorConns are ever open at once.
	refused429 := counts["429 too_many_requests"]
	if n := counts["503 too_many_connections"]; n < flood-doorConns-refused429 {
		t.Errorf("%d connections refused at the door, want at least %d", n, flood-doorConns-refused429)
	}
	if counts["held"] > doorConns {
		t.Errorf("the door holds %d connections without an answer, want at most %d", counts["held"], doorConns)
	}
	flooding := adminP50(t, gwURL, "flooding")

	victim := e.create(t, 1, store.RolloutConfig{TimeoutSeconds: 120}, repoTask(t, repo, map[string]any{"cmds": []string{fixCmd}, "gateway": gwURL}))[0]
	v := e.wait(t, []string{victim}, 2*time.Minute)[0]
	out := logText(t, e.events(t, victim, store.EventLog), "stdout")
	if v.Status != store.RolloutSucceeded || v.Reward == nil || *v.Reward != 1 {
		t.Fatalf("victim rollout %s (%s), reward %s, want succeeded with 1\n%s", v.Status, v.Error, fmtPtr(v.Reward), out)
	}
	if !strings.Contains(out, "MODEL 500\n") {
		t.Errorf("the victim's model call did not reach the gateway:\n%s", out)
	}
	t.Logf("admin API p50 (a new connection each): idle %s, while a sandbox floods its door through its forwarder %s", idle, flooding)

	a := e.wait(t, []string{attacker}, 2*time.Minute)[0]
	if a.Status != store.RolloutSucceeded || len(a.Attempts) != 1 {
		t.Fatalf("attacker rollout %s (%s) in %d attempts, want succeeded in 1 (heartbeats kept it alive)", a.Status, a.Error, len(a.Attempts))
	}
	var se sandboxEvent
	if e.one(t, attacker, store.EventSandbox, &se) {
		if se.DoorRefusedConns < int64(flood-doorConns-refused429) || se.DoorRefusedRequests == 0 {
			t.Errorf("sandbox event: door refused %d connections and %d requests, want at least %d and 1", se.DoorRefusedConns, se.DoorRefusedRequests, flood-doorConns-refused429)
		}
	}
}

// attackerDoor waits for the inside harness of rollout rid to run, and
// returns its door's socket, its route prefix and its scoped key.
func attackerDoor(t *testing.T, tmp, rid string) (sock, prefix, key string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		specs, _ := filepath.Glob(filepath.Join(tmp, "agl-attempt-*", "harness-sandbox.json"))
		for _, p := range specs {
			s, err := sandbox.Load(p)
			if err != nil {
				continue
			}
			env := map[string]string{}
			for _, kv := range s.Env {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			if env["AGL_ROLLOUT_ID"] != rid {
				continue
			}
			if _, err := os.Stat(s.Socket); err != nil {
				continue
			}
			return s.Socket, "/r/" + rid + "/" + env["AGL_ATTEMPT_ID"] + "/", env["OPENAI_API_KEY"]
		}
	}
	t.Fatalf("rollout %s's inside harness did not start", rid)
	return "", "", ""
}

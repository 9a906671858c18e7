package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

// buildAgl builds the agl binary once per test binary run.
var buildAgl = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "agl-bin")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "agl")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startGateway runs `agl gateway` as a subprocess and waits until it answers.
func startGateway(t *testing.T, bin, dataDir, addr string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "gateway", "--data-dir", dataDir, "--listen", addr)
	cmd.Env = append(os.Environ(), "AGL_ADMIN_KEY=crash-key")
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening") {
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("gateway did not start")
	}
	return cmd
}

// TestCrashSafety kills a real gateway with SIGKILL while clients append
// events; after a restart every event that got a 2xx is there, in order.
func TestCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin, err := buildAgl()
	if err != nil {
		t.Fatal(err)
	}
	dataDir, addr := t.TempDir(), freeAddr(t)
	gw := startGateway(t, bin, dataDir, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := api.NewClient("http://"+addr, "crash-key")
	const writers = 4
	var rs []store.NewRollout
	for w := 0; w < writers; w++ {
		rs = append(rs, store.NewRollout{ID: fmt.Sprint("crash-", w), Config: store.RolloutConfig{UnresponsiveSeconds: 3600}})
	}
	if _, err := c.CreateRollouts(ctx, rs); err != nil {
		t.Fatal(err)
	}
	claims := make([]store.Claim, writers)
	for w := range claims {
		cl, ok, err := c.Claim(ctx, store.ClaimRequest{WorkerID: "crash"})
		if err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		claims[w] = cl
	}
	acked := make([][]int, writers) // per writer: the batch numbers answered 2xx
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			cl := claims[w]
			for b := 0; ; b++ {
				evs := make([]store.NewEvent, 10)
				for i := range evs {
					evs[i] = store.NewEvent{Type: "log", Data: json.RawMessage(fmt.Sprintf(`{"b":%d,"i":%d}`, b, i))}
				}
				if _, err := c.AppendEvents(ctx, cl.Rollout.ID, cl.Attempt.ID, evs); err != nil {
					return // the gateway died
				}
				acked[w] = append(acked[w], b)
			}
		}(w)
	}
	time.Sleep(1500 * time.Millisecond)
	if err := gw.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	gw.Wait()
	wg.Wait()

	gw2 := startGateway(t, bin, dataDir, addr)
	defer func() { gw2.Process.Signal(syscall.SIGTERM); gw2.Wait() }()
	total := 0
	for w, cl := range claims {
		evs, err := c.ListEvents(ctx, store.EventFilter{RolloutID: cl.Rollout.ID})
		if err != nil {
			t.Fatal(err)
		}
		if len(acked[w]) == 0 {
			t.Fatalf("writer %d got no 2xx before the kill", w)
		}
		// Stored events are whole batches, in order, and include every acked one.
		if len(evs)%10 != 0 {
			t.Errorf("writer %d: %d events stored, not whole batches", w, len(evs))
		}
		for k, e := range evs {
			var d struct{ B, I int }
			json.Unmarshal(e.Data, &d)
			if d.B != k/10 || d.I != k%10 {
				t.Fatalf("writer %d: event %d is %s, want batch %d item %d", w, k, e.Data, k/10, k%10)
			}
		}
		if got, want := len(evs)/10, len(acked[w]); got < want {
			t.Errorf("writer %d: %d batches acked but only %d survived", w, want, got)
		}
		total += len(acked[w]) * 10
	}
	t.Logf("%d acked events survived SIGKILL", total)
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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

// startGateway runs `agl gateway` as a subprocess and waits until it answers.
func startGateway(t *testing.T, bin, dataDir, addr string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"gateway", "--data-dir", dataDir, "--listen", addr}, args...)...)
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
	dataDir, addr := t.TempDir(), testutil.FreeAddr(t)
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

// vllmAnswer is a zero-think-time vLLM-format chat completion.
const vllmAnswer = `{"id":"up","object":"chat.completion","created":1,"model":"m","prompt_token_ids":[1,2,3],` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"logprobs":{"content":[{"token":"ok","logprob":-0.5}]},` +
	`"finish_reason":"stop","token_ids":[7]}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`

// vllmUpstream is a loopback vLLM-format upstream answering every call
// with vllmAnswer; it is closed when t ends.
func vllmUpstream(t *testing.T) *httptest.Server {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, vllmAnswer)
	}))
	t.Cleanup(up.Close)
	return up
}

// upstreamConfig starts a loopback upstream that answers every call with
// vllmAnswer and writes dir/agl.yaml: extra YAML (top-level sections), then
// an engine section naming that upstream as model "m". It returns the
// config's path.
func upstreamConfig(t *testing.T, dir, extra string) string {
	t.Helper()
	up := vllmUpstream(t)
	cfg := filepath.Join(dir, "agl.yaml")
	yml := extra + "engine:\n  upstream:\n    models:\n      - name: m\n        endpoints: [\"" + up.URL + "/v1\"]\n"
	if err := os.WriteFile(cfg, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestCrashSafetyModelCalls kills a real gateway with SIGKILL while
// harnesses make model calls through it (events recorded by the gateway,
// in shared transactions); after a restart the model_request event of
// every call answered 200 is there, in each harness's call order.
func TestCrashSafetyModelCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin, err := buildAgl()
	if err != nil {
		t.Fatal(err)
	}
	dataDir, addr := t.TempDir(), testutil.FreeAddr(t)
	cfg := upstreamConfig(t, dataDir, "")
	gw := startGateway(t, bin, dataDir, addr, "--config", cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := api.NewClient("http://"+addr, "crash-key")
	const harnesses = 8
	var rs []store.NewRollout
	for h := 0; h < harnesses; h++ {
		rs = append(rs, store.NewRollout{ID: fmt.Sprint("calls-", h), Config: store.RolloutConfig{UnresponsiveSeconds: 3600}})
	}
	if _, err := c.CreateRollouts(ctx, rs); err != nil {
		t.Fatal(err)
	}
	claims := make([]store.Claim, harnesses)
	for h := range claims {
		cl, ok, err := c.Claim(ctx, store.ClaimRequest{WorkerID: "crash"})
		if err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		claims[h] = cl
	}
	acked := make([][]string, harnesses) // per harness: response ids answered 200
	hc := &http.Client{Timeout: 10 * time.Second}
	var wg sync.WaitGroup
	for h := 0; h < harnesses; h++ {
		wg.Add(1)
		go func(h int) {
			defer wg.Done()
			cl := claims[h]
			url := "http://" + addr + "/r/" + cl.Rollout.ID + "/" + cl.Attempt.ID + "/v1/chat/completions"
			for k := 0; ; k++ {
				body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"call %d"}]}`, k)
				req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+cl.Key)
				resp, err := hc.Do(req)
				if err != nil {
					return // the gateway died
				}
				var out struct{ ID string }
				err = json.NewDecoder(resp.Body).Decode(&out)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || err != nil {
					return
				}
				acked[h] = append(acked[h], out.ID)
			}
		}(h)
	}
	time.Sleep(1500 * time.Millisecond)
	if err := gw.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	gw.Wait()
	wg.Wait()

	gw2 := startGateway(t, bin, dataDir, addr, "--config", cfg)
	defer func() { gw2.Process.Signal(syscall.SIGTERM); gw2.Wait() }()
	total := 0
	for h, cl := range claims {
		evs, err := c.ListEvents(ctx, store.EventFilter{RolloutID: cl.Rollout.ID, Types: []string{store.EventModelRequest}})
		if err != nil {
			t.Fatal(err)
		}
		if len(acked[h]) == 0 {
			t.Fatalf("harness %d got no 200 before the kill", h)
		}
		// The stored calls are the acked ones in order, then at most the
		// one in flight at the kill (recorded, its answer lost).
		if len(evs) < len(acked[h]) || len(evs) > len(acked[h])+1 {
			t.Fatalf("harness %d: %d calls acked, %d recorded", h, len(acked[h]), len(evs))
		}
		for k, id := range acked[h] {
			var mc api.ModelCall
			if err := json.Unmarshal(evs[k].Data, &mc); err != nil {
				t.Fatal(err)
			}
			if mc.CallID != id {
				t.Fatalf("harness %d: event %d records call %s, acked call %d was %s", h, k, mc.CallID, k, id)
			}
		}
		total += len(acked[h])
	}
	t.Logf("%d acked model calls survived SIGKILL", total)
}

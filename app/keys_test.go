package app

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
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/config"
	"github.com/aglrl/agl/internal/doccheck"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/samples"
	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/trainer"
)

// keyEnv is a running stack as a key's check sees it.
type keyEnv struct {
	url, addr string
	key       string // the admin key
	st        store.Store
	eng       *testutil.ScriptEngine
	stop      func() // ends the command (as an interrupt does)
}

// do sends one request with the admin key; body "" sends none.
func (e *keyEnv) do(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.url+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// claim creates a rollout and starts an attempt on it through the API.
func (e *keyEnv) claim(t *testing.T) store.Claim {
	t.Helper()
	c := api.NewClient(e.url, e.key)
	if _, err := c.CreateRollouts(context.Background(), []store.NewRollout{{Task: json.RawMessage(`{}`), Mode: store.ModeTrain}}); err != nil {
		t.Fatal(err)
	}
	cl, ok, err := c.Claim(context.Background(), store.ClaimRequest{WorkerID: "keys", Mode: store.ModeTrain})
	if err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	return cl
}

// chatCall makes one chat completion on the attempt of cl with a user
// message of n bytes; the scripted engine answers "ok".
func (e *keyEnv) chatCall(t *testing.T, cl store.Claim, n int) (int, string) {
	t.Helper()
	code, b, err := e.chatRequest(cl, n)
	if err != nil {
		t.Fatal(err)
	}
	return code, b
}

func (e *keyEnv) chatRequest(cl store.Claim, n int) (int, string, error) {
	e.eng.Push(chat.Message{Role: "assistant", Content: "ok"})
	body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":%q}]}`, noise(n))
	req, _ := http.NewRequest("POST", e.url+"/r/"+cl.Rollout.ID+"/"+cl.Attempt.ID+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+cl.Key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// noise is n bytes of text that does not compress.
func noise(n int) string {
	var b strings.Builder
	x := uint32(2463534242)
	for b.Len() < n {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b.WriteByte('a' + byte(x%26))
	}
	return b.String()
}

// raw sends raw on a fresh connection and reads the answer.
func raw(t *testing.T, addr, raw string) (*http.Response, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, raw)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		c.Close()
		t.Fatalf("no answer: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	return resp, c
}

// closedWithin tells whether the server closes c within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// keyCase is one gateway key: the YAML that sets it (under gateway:) and
// a check that fails when the running command ignores it (each value is
// chosen away from the default). stopped, when set, gets how long the
// command took to end after env.stop.
type keyCase struct {
	key, yaml string
	check     func(t *testing.T, e *keyEnv)
	stopped   func(t *testing.T, d time.Duration)
}

func keyCases(t *testing.T) []keyCase {
	listen := testutil.FreeAddr(t)
	return []keyCase{
		{key: "listen", yaml: "listen: " + listen, check: func(t *testing.T, e *keyEnv) {
			if e.addr != listen {
				t.Errorf("listening on %s, want %s", e.addr, listen)
			}
		}},
		{key: "admin_key", yaml: "admin_key: k3y-of-the-config", check: func(t *testing.T, e *keyEnv) {
			if e.key != "k3y-of-the-config" {
				t.Fatalf("admin key %q", e.key)
			}
			if code, body := e.do(t, "GET", "/api/rollouts", ""); code != 200 {
				t.Errorf("with the key: %d %s", code, body)
			}
			e.key = "other"
			if code, _ := e.do(t, "GET", "/api/rollouts", ""); code != 401 {
				t.Errorf("with another key: %d, want 401", code)
			}
		}},
		{key: "max_body_bytes", yaml: "max_body_bytes: 2000", check: func(t *testing.T, e *keyEnv) {
			body := `[{"task":{"pad":"` + strings.Repeat("x", 3000) + `"}}]`
			if code, b := e.do(t, "POST", "/api/rollouts", body); code != 413 {
				t.Errorf("a 3000-byte body: %d %s, want 413", code, b)
			}
		}},
		{key: "max_stored_call_bytes", yaml: "max_stored_call_bytes: 3000", check: func(t *testing.T, e *keyEnv) {
			cl := e.claim(t)
			if code, b := e.chatCall(t, cl, 100); code != 200 {
				t.Fatalf("a small call: %d %s", code, b)
			}
			if code, b := e.chatCall(t, cl, 20000); code != 413 || !strings.Contains(b, "call_too_large") {
				t.Errorf("a call storing over 3000 bytes: %d %s, want 413 call_too_large", code, b)
			}
		}},
		{key: "max_stored_attempt_bytes", yaml: "max_stored_attempt_bytes: 6000", check: func(t *testing.T, e *keyEnv) {
			cl := e.claim(t)
			if code, b := e.chatCall(t, cl, 1000); code != 200 {
				t.Fatalf("a small call: %d %s", code, b)
			}
			if code, b := e.chatCall(t, cl, 20000); code != 413 || !strings.Contains(b, "attempt_too_large") {
				t.Errorf("a call taking the attempt over 6000 bytes: %d %s, want 413 attempt_too_large", code, b)
			}
		}},
		{key: "reap_interval", yaml: "reap_interval: 50ms", check: func(t *testing.T, e *keyEnv) {
			// The default (2s) runs no pass within a second.
			deadline := time.Now().Add(time.Second)
			for {
				_, body := e.do(t, "GET", "/metrics", "")
				if n := metricValue(body, "agl_reaper_passes_total"); n >= 3 {
					return
				} else if time.Now().After(deadline) {
					t.Fatalf("%v reaper passes in a second, reap_interval 50ms", n)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}},
		{key: "drain_timeout", yaml: "drain_timeout: 300ms", check: func(t *testing.T, e *keyEnv) {
			e.eng.Gate = make(chan struct{})
			e.eng.Started = make(chan struct{}, 1)
			cl := e.claim(t)
			go e.chatRequest(cl, 10) // held in flight by the gate
			<-e.eng.Started
			e.stop()
		}, stopped: func(t *testing.T, d time.Duration) {
			// The default waits 30s for the call held in flight.
			if d < 250*time.Millisecond || d > 5*time.Second {
				t.Errorf("ended %s after the interrupt with a call in flight, drain_timeout 300ms", d)
			}
		}},
		{key: "max_abs_reward", yaml: "max_abs_reward: 10", check: func(t *testing.T, e *keyEnv) {
			cl := e.claim(t)
			path := "/api/rollouts/" + cl.Rollout.ID + "/attempts/" + cl.Attempt.ID + "/events"
			if code, b := e.do(t, "POST", path, `{"events":[{"type":"reward","data":5}]}`); code != 200 {
				t.Fatalf("reward 5: %d %s", code, b)
			}
			if code, b := e.do(t, "POST", path, `{"events":[{"type":"reward","data":50}]}`); code != 400 {
				t.Errorf("reward 50 over max_abs_reward 10: %d %s, want 400", code, b)
			}
		}},
		{key: "wait_poll", yaml: "wait_poll: 1h", check: func(t *testing.T, e *keyEnv) {
			// A rollout ended behind the gateway's back (no wake-up) is
			// seen by a long-poll only when it re-reads the store: at the
			// poll (250ms by default), or here when its wait ends.
			done := make(chan time.Duration, 1)
			start := time.Now()
			go func() {
				e.do(t, "GET", "/api/terminal?after=0&wait=1500ms", "")
				done <- time.Since(start)
			}()
			time.Sleep(100 * time.Millisecond)
			rs, err := e.st.CreateRollouts(context.Background(), []store.NewRollout{{Task: json.RawMessage(`{}`)}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.st.CancelRollout(context.Background(), rs[0].ID, "keys"); err != nil {
				t.Fatal(err)
			}
			if d := <-done; d < 1200*time.Millisecond {
				t.Errorf("the long-poll saw the change after %s, wait_poll 1h", d)
			}
		}},
		{key: "read_header_timeout", yaml: "read_header_timeout: 300ms", check: func(t *testing.T, e *keyEnv) {
			c, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, "GET /api/health HTTP/1.1\r\n")
			if !closedWithin(c, 3*time.Second) {
				t.Errorf("headers never ended, connection still open after 3s, read_header_timeout 300ms")
			}
		}},
		{key: "read_body_timeout", yaml: "read_body_timeout: 300ms", check: func(t *testing.T, e *keyEnv) {
			resp, c := raw(t, e.addr, "POST /api/rollouts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+e.key+"\r\nContent-Length: 100\r\n\r\n[")
			defer c.Close()
			if resp.StatusCode != 408 {
				t.Errorf("a body that never arrives: %d, want 408", resp.StatusCode)
			}
		}},
		{key: "idle_timeout", yaml: "idle_timeout: 300ms", check: func(t *testing.T, e *keyEnv) {
			resp, c := raw(t, e.addr, "GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n")
			defer c.Close()
			if resp.StatusCode != 200 || !closedWithin(c, 3*time.Second) {
				t.Errorf("idle keep-alive connection still open after 3s, idle_timeout 300ms (answer %d)", resp.StatusCode)
			}
		}},
		{key: "max_header_bytes", yaml: "max_header_bytes: 2000", check: func(t *testing.T, e *keyEnv) {
			resp, c := raw(t, e.addr, "GET /api/health HTTP/1.1\r\nHost: x\r\nX-Pad: "+strings.Repeat("p", 8000)+"\r\n\r\n")
			defer c.Close()
			if resp.StatusCode != 431 {
				t.Errorf("8000 bytes of headers: %d, want 431", resp.StatusCode)
			}
		}},
		{key: "max_conns", yaml: "max_conns: 2", check: func(t *testing.T, e *keyEnv) {
			overConns(t, e.addr, 2)
		}},
		{key: "max_conns_per_ip", yaml: "max_conns_per_ip: 2", check: func(t *testing.T, e *keyEnv) {
			overConns(t, e.addr, 2)
		}},
	}
}

// overConns holds n connections and checks the next one gets 503
// too_many_connections.
func overConns(t *testing.T, addr string, n int) {
	t.Helper()
	for range n {
		resp, c := raw(t, addr, "GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n")
		defer c.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("held connection: %d", resp.StatusCode)
		}
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("connection over the cap: no answer: %v", err)
	}
	var eb api.ErrorBody
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || json.Unmarshal(b, &eb) != nil || eb.Error.Code != "too_many_connections" {
		t.Errorf("connection over the cap of %d: %d %s", n, resp.StatusCode, b)
	}
}

// metricValue is the value of an unlabelled metric in a scrape (-1: absent).
func metricValue(scrape, name string) float64 {
	for _, line := range strings.Split(scrape, "\n") {
		var v float64
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			if _, err := fmt.Sscan(rest, &v); err == nil {
				return v
			}
		}
	}
	return -1
}

// unusedPolicy is the trained policy of a train run these tests end before
// its first step: anything asked of it is an error.
type unusedPolicy struct{}

var errUnused = errors.New("the key tests end before the first step")

func (unusedPolicy) Step(context.Context, []samples.Sample) (trainer.StepStats, error) {
	return trainer.StepStats{}, errUnused
}
func (unusedPolicy) Publish(context.Context, int64) error { return errUnused }
func (unusedPolicy) SaveCheckpoint(string) error          { return errUnused }

// TestGatewayKeysInEveryCommand: every gateway.* key (but write_timeout,
// see TestEveryGatewayKeyHasACase) is honoured by both `agl gateway` (OpenGateway) and
// `agl train` (Train), each run on a scripted engine.
func TestGatewayKeysInEveryCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the gateway 30 times, with timeouts of up to 1.5s")
	}
	tmpl, err := chat.NewSmall()
	if err != nil {
		t.Fatal(err)
	}
	for _, kc := range keyCases(t) {
		for _, cmd := range []string{"gateway", "train"} {
			t.Run(kc.key+"/"+cmd, func(t *testing.T) {
				dir := t.TempDir()
				tasks := filepath.Join(dir, "tasks.jsonl")
				if err := os.WriteFile(tasks, []byte("{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				yml := fmt.Sprintf("data_dir: run\ngateway:\n  %s\ncontroller:\n  command: [\"true\"]\ntrainer:\n  tasks: tasks.jsonl\n  steps: 1\n", kc.yaml)
				cfgPath := filepath.Join(dir, "agl.yaml")
				if err := os.WriteFile(cfgPath, []byte(yml), 0o644); err != nil {
					t.Fatal(err)
				}
				c, err := Load(cfgPath)
				if err != nil {
					t.Fatal(err)
				}
				eng := &testutil.ScriptEngine{Tmpl: tmpl, ModelVersion: 1}
				models := &Models{Backend: proxy.NewTokenBackend(eng, tmpl, tmpl.Tokenizer(), 0), Format: tmpl,
					Policies: []trainer.TrainedPolicy{{Name: "agl", Policy: unusedPolicy{}}}}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var mu sync.Mutex
				var stoppedAt time.Time
				stop := func() {
					mu.Lock()
					stoppedAt = time.Now()
					mu.Unlock()
					cancel()
				}
				env := func(st store.Store, url, key string) *keyEnv {
					return &keyEnv{url: url, addr: strings.TrimPrefix(url, "http://"), key: key, st: st, eng: eng, stop: stop}
				}
				var runErr error
				switch cmd {
				case "gateway":
					s, err := OpenGateway(ctx, c, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Models: models})
					if err != nil {
						t.Fatal(err)
					}
					defer s.Close()
					ready := make(chan string, 1)
					done := make(chan error, 1)
					go func() {
						done <- s.ListenAndServe(ctx, "", func(a net.Addr) { ready <- "http://" + a.String() })
					}()
					select {
					case url := <-ready:
						kc.check(t, env(s.Store, url, c.Gateway.AdminKey))
					case err := <-done:
						t.Fatal(err)
					}
					stop()
					runErr = <-done
				case "train":
					runErr = Train(ctx, c, TrainOptions{Options: Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Models: models},
						Ready: func(s *Stack, url string) {
							key := c.Gateway.AdminKey
							if key == "" {
								b, err := os.ReadFile(filepath.Join(c.DataDir, "admin_key"))
								if err != nil {
									t.Fatal(err)
								}
								key = strings.TrimSpace(string(b))
							}
							kc.check(t, env(s.Store, url, key))
							stop()
						}})
				}
				if eng.Gate != nil {
					close(eng.Gate)
				}
				mu.Lock()
				d := time.Since(stoppedAt)
				mu.Unlock()
				// A drain cut short by drain_timeout ends agl gateway with
				// its deadline.
				if runErr != nil && !errors.Is(runErr, context.Canceled) && (kc.stopped == nil || !errors.Is(runErr, context.DeadlineExceeded)) {
					t.Errorf("%s ended: %v", cmd, runErr)
				}
				if kc.stopped != nil {
					kc.stopped(t, d)
				}
			})
		}
	}
}

// TestEveryGatewayKeyHasACase: a new gateway.* key gets its case in
// TestGatewayKeysInEveryCommand. write_timeout has none: its check needs
// a client that stops reading an answer larger than the socket buffers.
func TestEveryGatewayKeyHasACase(t *testing.T) {
	have := map[string]bool{"write_timeout": true}
	for _, kc := range keyCases(t) {
		have[kc.key] = true
	}
	keys, err := doccheck.Keys("gateway", reflect.TypeFor[config.Gateway](), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		k = strings.TrimPrefix(k, "gateway.")
		if !have[k] {
			t.Errorf("gateway.%s has no case in TestGatewayKeysInEveryCommand", k)
		}
		delete(have, k)
	}
	for k := range have {
		t.Errorf("case %s is not a gateway key", k)
	}
}

package controller

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aglrl/agl/sandbox"
)

// The harness inside the sandbox (sandbox.harness: inside) reaches the
// gateway through one door: a unix socket in the attempt's private dir,
// bound into the sandbox, served by gatewayDoor, and relayed to
// 127.0.0.1:sandbox.ForwardPort inside by `agl sandbox forward`.

// gatewayDoor serves the attempt's own gateway routes
// (/r/{rollout}/{attempt}/…) on a unix socket, without its events route;
// everything else is refused with 403. It holds at most
// sandbox.door_conns connections (more are closed at once) and passes at
// most sandbox.door_requests requests at a time (more get 429), through
// the controller's door pool (runner.door): a flooding sandbox holds a
// bounded share of the gateway's connections, never the controller's.
type gatewayDoor struct {
	ln  net.Listener
	srv *http.Server
}

// doorCounts counts what a door refused.
type doorCounts struct {
	conns, requests atomic.Int64
}

func (c *runner) openDoor(a *attempt, sock string) (*gatewayDoor, error) {
	target, err := url.Parse(c.cfg.GatewayURL)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	refused := &a.repo.doorRefused
	prefix := "/r/" + a.rid + "/" + a.aid + "/"
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = c.door
	rp.FlushInterval = -1 // streamed answers pass at once
	rp.ErrorLog = slog.NewLogLogger(a.log.Handler(), slog.LevelDebug)
	inFlight := make(chan struct{}, c.cfg.Sandbox.DoorRequests)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !doorAllows(prefix, r.URL) {
			doorError(w, http.StatusForbidden, "forbidden", "the sandbox reaches only this attempt's model routes under "+prefix+" (not its events)")
			return
		}
		select {
		case inFlight <- struct{}{}:
			defer func() { <-inFlight }()
		default:
			refused.requests.Add(1)
			w.Header().Set("Retry-After", "1")
			doorError(w, http.StatusTooManyRequests, "too_many_requests", fmt.Sprintf("the sandbox has %d requests in flight to the gateway, its most (controller.sandbox.door_requests); retry later", cap(inFlight)))
			return
		}
		rp.ServeHTTP(w, r)
	})
	d := &gatewayDoor{ln: &capListener{Listener: ln, slots: make(chan struct{}, c.cfg.Sandbox.DoorConns), refused: &refused.conns},
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 30 * time.Second}}
	go d.srv.Serve(d.ln)
	return d, nil
}

// doorError answers with the gateway's JSON error shape.
func doorError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":{"code":%s,"message":%s}}`, strconv.Quote(code), strconv.Quote(msg))
}

// doorFull is the answer's body to a connection over sandbox.door_conns.
const doorFull = `{"error":{"code":"too_many_connections","message":"the sandbox has its most connections open to the gateway (controller.sandbox.door_conns); retry later"}}` + "\n"

// capListener holds at most cap(slots) connections open; one more is
// answered 503 (doorFull) and closed as soon as it is accepted, and counted in
// refused.
type capListener struct {
	net.Listener
	slots   chan struct{}
	refused *atomic.Int64
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &capConn{Conn: conn, slots: l.slots}, nil
		default:
			l.refused.Add(1)
			conn.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			io.WriteString(conn, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nRetry-After: 1\r\nContent-Length: "+
				strconv.Itoa(len(doorFull))+"\r\n\r\n"+doorFull)
			conn.Close()
		}
	}
}

// capConn frees its slot once closed.
type capConn struct {
	net.Conn
	slots chan struct{}
	once  sync.Once
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.slots })
	return err
}

// doorAllows reports whether u is one of the attempt's model routes: under
// prefix, in canonical form, and not the events route.
func doorAllows(prefix string, u *url.URL) bool {
	p := u.Path
	if u.RawPath != "" || !strings.HasPrefix(p, prefix) || strings.Contains(p, "//") {
		return false
	}
	if c := path.Clean(p); c != p && c+"/" != p {
		return false
	}
	rest := strings.TrimPrefix(p, prefix)
	return rest != "events" && !strings.HasPrefix(rest, "events/")
}

func (d *gatewayDoor) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	d.srv.Shutdown(ctx)
	d.srv.Close()
}

// insideCommand runs the harness in the attempt's sandbox: `agl sandbox
// exec` with a spec whose environment holds the scoped key, the base URLs
// through the door, the task as the harness sees it and the attempt's ids
// — no admin key, reward file or events URL.
func (c *runner) insideCommand(a *attempt) (*exec.Cmd, error) {
	r := a.repo
	sock := filepath.Join(a.dir, "gateway.sock")
	d, err := c.openDoor(a, sock)
	if err != nil {
		return nil, fmt.Errorf("the sandbox's gateway door: %w", err)
	}
	r.door = d
	base := "http://127.0.0.1:" + strconv.Itoa(sandbox.ForwardPort) + "/r/" + url.PathEscape(a.rid) + "/" + url.PathEscape(a.aid)
	env := append([]string(nil), c.cfg.Env...)
	env = append(env, r.spec.Env...)
	for _, kv := range a.env {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "AGL_TASK", "AGL_ROLLOUT_ID", "AGL_ATTEMPT_ID", "AGL_MODE":
			env = append(env, kv)
		}
	}
	env = append(env, "OPENAI_BASE_URL="+base+"/v1", "ANTHROPIC_BASE_URL="+base, "GOOGLE_GEMINI_BASE_URL="+base)
	spec := r.spec
	spec.Env = env
	spec.Socket = sock
	// The harness is not one of the model's commands: its own journal.
	r.harnessJournal = filepath.Join(a.dir, "harness-sandbox.journal")
	spec.Journal = r.harnessJournal
	spec.ReadOnly = append(append([]string(nil), spec.ReadOnly...), c.cfg.Agl)
	if c.cfg.Dir != "" {
		spec.ReadOnly = append(spec.ReadOnly, c.cfg.Dir)
	}
	// The harness's time limit is the attempt's (the controller enforces
	// it); its stdout and stderr reach the attempt's log files up to
	// sandbox.harness_output_bytes each, the rest is drained and counted.
	spec.Limits.Timeout = 30 * 24 * time.Hour
	spec.Limits.CPUSeconds = 1 << 30
	spec.Limits.OutputBytes = c.cfg.Sandbox.HarnessOutputBytes
	specPath := filepath.Join(a.dir, "harness-sandbox.json")
	if err := spec.Save(specPath); err != nil {
		return nil, err
	}
	argv := harnessArgv(a.argv, c.cfg.Dir)
	args := append([]string{"sandbox", "exec", "--spec", specPath, "--", c.cfg.Agl, "sandbox", "forward", "--"}, argv...)
	cmd := exec.Command(c.cfg.Agl, args...)
	cmd.Dir, cmd.Env = a.dir, a.env
	return cmd, nil
}

// closeDoor stops serving the sandbox's gateway socket.
func (r *repoAttempt) closeDoor() {
	if r.door != nil {
		r.door.close()
		r.door = nil
	}
}

// harnessArgv is the harness command as run inside the sandbox, whose cwd
// is the workspace: a program given as ./x, and any relative argument
// naming a file of dir (e.g. [python3, harness.py]), become absolute paths
// under dir (bound read-only).
func harnessArgv(command []string, dir string) []string {
	argv := append([]string(nil), command...)
	if dir == "" {
		return argv
	}
	for i, a := range argv {
		if a == "" || filepath.IsAbs(a) || strings.HasPrefix(a, "-") {
			continue
		}
		if i == 0 && !strings.Contains(a, "/") {
			continue // a program looked up in PATH
		}
		if _, err := os.Stat(filepath.Join(dir, a)); err == nil {
			argv[i] = filepath.Join(dir, a)
		}
	}
	return argv
}

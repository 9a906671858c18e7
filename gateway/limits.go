package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/aglrl/agl/api"
)

// Limits bound what one client can hold of the server. Zero fields take
// the defaults below; a negative timeout or cap disables it.
type Limits struct {
	// ReadHeaderTimeout bounds reading a request's headers (default 10s):
	// a client trickling header bytes (slowloris) is cut then.
	ReadHeaderTimeout time.Duration
	// ReadBodyTimeout bounds reading a request's body, from the end of its
	// headers (default 60s); a body that does not arrive in time is
	// answered 408 and the connection closed. Once the body has been read
	// the deadline is lifted, so long calls are not cancelled by it.
	ReadBodyTimeout time.Duration
	// WriteTimeout bounds each write of an answer (default 60s): it is
	// extended on every write and flush, so a long streaming answer is
	// never cut while the client reads it, but a client that stops
	// reading is.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection with no request for this
	// long (default 120s).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers (default 1 MiB; net/http
	// allows 4 KiB more); larger ones are answered 431.
	MaxHeaderBytes int
	// MaxConns bounds open connections in all (default 4096) and
	// MaxConnsPerIP those from one remote address (default 1024); a
	// connection over either is answered 503 and closed.
	MaxConns      int
	MaxConnsPerIP int
}

// DefaultLimits are the limits a zero Limits takes.
var DefaultLimits = Limits{
	ReadHeaderTimeout: 10 * time.Second,
	ReadBodyTimeout:   60 * time.Second,
	WriteTimeout:      60 * time.Second,
	IdleTimeout:       120 * time.Second,
	MaxHeaderBytes:    1 << 20,
	MaxConns:          4096,
	MaxConnsPerIP:     1024,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	pick := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		} else if *v < 0 {
			*v = 0
		}
	}
	pick(&l.ReadHeaderTimeout, d.ReadHeaderTimeout)
	pick(&l.ReadBodyTimeout, d.ReadBodyTimeout)
	pick(&l.WriteTimeout, d.WriteTimeout)
	pick(&l.IdleTimeout, d.IdleTimeout)
	pickN := func(v *int, def int) {
		if *v == 0 {
			*v = def
		} else if *v < 0 {
			*v = 0
		}
	}
	pickN(&l.MaxHeaderBytes, d.MaxHeaderBytes)
	pickN(&l.MaxConns, d.MaxConns)
	pickN(&l.MaxConnsPerIP, d.MaxConnsPerIP)
	return l
}

// protect runs one request under the limits: the body's read deadline, the
// answer's rolling write deadline, and a panic answered 500 in the JSON
// error shape (or, once the answer has started, the connection aborted).
func (s *Server) protect(w http.ResponseWriter, r *http.Request, next func(http.ResponseWriter, *http.Request)) {
	lim := s.opt.Limits
	rc := http.NewResponseController(w)
	lw := &limitWriter{ResponseWriter: w, rc: rc, timeout: lim.WriteTimeout}
	if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		b := &deadlineBody{ReadCloser: r.Body, rc: rc}
		// Servers that do not support deadlines (httptest's recorder)
		// answer ErrNotSupported: the request then runs without one.
		if lim.ReadBodyTimeout > 0 && rc.SetReadDeadline(time.Now().Add(lim.ReadBodyTimeout)) == nil {
			b.lift = true
		}
		r.Body, lw.body = b, b
	}
	defer func() {
		p := recover()
		if p == nil {
			lw.extend()
			return
		}
		if p == http.ErrAbortHandler {
			panic(p)
		}
		s.log.Error("handler panic", "method", r.Method, "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
		if lw.wrote {
			panic(http.ErrAbortHandler)
		}
		lw.Header().Set("Connection", "close")
		api.WriteError(lw, s.log, api.Errorf(http.StatusInternalServerError, "internal", "internal error: the request was not completed"))
	}()
	next(lw, r)
}

// limitWriter extends the connection's write deadline before each write,
// so the deadline bounds the wait for one write, not the whole answer.
type limitWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	until   time.Time
	wrote   bool
	body    *deadlineBody // nil without a request body
}

func (w *limitWriter) extend() {
	if w.timeout <= 0 {
		return
	}
	now := time.Now()
	if w.until.Sub(now) > w.timeout/2 {
		return
	}
	w.until = now.Add(w.timeout)
	_ = w.rc.SetWriteDeadline(w.until)
}

func (w *limitWriter) WriteHeader(code int) {
	if code >= 200 {
		w.wrote = true
	}
	// A refusal (401, 403, 413, …) of a request whose body was not read
	// closes the connection rather than waiting for that body to drain:
	// an unauthenticated client holds nothing once it is answered.
	// net/http would still read up to 256 KiB of a declared body after
	// the handler (until the body's read deadline): the deadline is moved
	// to now, so that read ends at once and the connection is closed.
	if code >= 400 && w.body != nil && !w.body.eof {
		w.Header().Set("Connection", "close")
		_ = w.rc.SetReadDeadline(time.Now())
	}
	w.extend()
	w.ResponseWriter.WriteHeader(code)
}

func (w *limitWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	w.extend()
	return w.ResponseWriter.Write(b)
}

// Flush implements http.Flusher.
func (w *limitWriter) Flush() {
	w.extend()
	_ = w.rc.Flush()
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *limitWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// deadlineBody notes when the body has been read to its end and then
// lifts the body's read deadline (lift), so that net/http's background
// read (which watches for the client going away) does not cancel a long
// call when the deadline passes.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	lift bool
	eof  bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.eof {
		b.eof = true
		if b.lift {
			_ = b.rc.SetReadDeadline(time.Time{})
		}
	}
	return n, err
}

// isTimeout reports whether a body read failed on its deadline.
func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// limitListener caps open connections in all and per remote IP, and wraps
// each accepted connection in a limitConn.
type limitListener struct {
	net.Listener
	max, perIP int

	mu    sync.Mutex
	total int
	byIP  map[string]int

	// refusing bounds the goroutines answering refused connections.
	refusing chan struct{}
}

func newLimitListener(ln net.Listener, lim Limits) *limitListener {
	return &limitListener{Listener: ln, max: lim.MaxConns, perIP: lim.MaxConnsPerIP, byIP: map[string]int{}, refusing: make(chan struct{}, 64)}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c.RemoteAddr())
		if l.acquire(ip) {
			return &limitConn{Conn: c, l: l, ip: ip}, nil
		}
		l.refuse(c)
	}
}

func remoteIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

func (l *limitListener) acquire(ip string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.max > 0 && l.total >= l.max {
		return false
	}
	if l.perIP > 0 && l.byIP[ip] >= l.perIP {
		return false
	}
	l.total++
	l.byIP[ip]++
	return true
}

func (l *limitListener) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.byIP[ip]--; l.byIP[ip] <= 0 {
		delete(l.byIP, ip)
	}
}

// refuse answers a connection over the cap with a 503 in the JSON error
// shape and closes it; when too many refusals are already being answered
// it just closes it.
func (l *limitListener) refuse(c net.Conn) {
	select {
	case l.refusing <- struct{}{}:
	default:
		c.Close()
		return
	}
	go func() {
		defer func() { <-l.refusing }()
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Second))
		c.Write(cannedResponse(http.StatusServiceUnavailable, "too_many_connections", "too many open connections; retry later", "Retry-After: 1\r\n"))
		// Half-close and drain what the client sent, so that the answer is
		// not lost to a reset by unread data.
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
			io.Copy(io.Discard, io.LimitReader(c, 64<<10))
		}
	}()
}

// cannedResponse is a complete HTTP/1.1 answer carrying the JSON error
// shape, for connections net/http or the cap refuse outside any handler.
func cannedResponse(status int, code, msg, extraHeaders string) []byte {
	body, _ := json.Marshal(api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: msg}})
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) + "\r\n")
	b.WriteString("Content-Type: application/json\r\nConnection: close\r\n" + extraHeaders)
	b.WriteString("Content-Length: " + strconv.Itoa(len(body)+1) + "\r\n\r\n")
	b.Write(body)
	b.WriteByte('\n')
	return b.Bytes()
}

// limitConn releases its slot once closed, and rewrites the plain-text
// answers net/http writes straight to the connection for requests it
// refuses before any handler runs (431 header too large, 400 malformed
// request, 501 unsupported transfer encoding, …) into the JSON error shape.
type limitConn struct {
	net.Conn
	l    *limitListener
	ip   string
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.ip) })
	return err
}

// CloseWrite lets net/http half-close the connection as it does a TCPConn.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// netHTTPErrorHeaders is what net/http puts after the status line of the
// answers it writes itself; handler answers never carry these headers in
// this order (net/http sorts a handler's headers, Connection first).
const netHTTPErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

func (c *limitConn) Write(b []byte) (int, error) {
	if out := rewriteNetHTTPError(b); out != nil {
		if _, err := c.Conn.Write(out); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// rewriteNetHTTPError returns the JSON version of one of net/http's own
// plain-text error answers, or nil when b is not one.
func rewriteNetHTTPError(b []byte) []byte {
	rest, ok := bytes.CutPrefix(b, []byte("HTTP/1.1 "))
	if !ok || len(rest) < 4 || rest[3] != ' ' {
		return nil
	}
	status, err := strconv.Atoi(string(rest[:3]))
	if err != nil || status < 400 {
		return nil
	}
	line, body, ok := bytes.Cut(rest[4:], []byte(netHTTPErrorHeaders))
	if !ok || bytes.ContainsAny(line, "\r\n") {
		return nil
	}
	code := "bad_request"
	switch status {
	case http.StatusRequestHeaderFieldsTooLarge:
		code = "header_too_large"
	case http.StatusNotImplemented:
		code = "not_implemented"
	case http.StatusHTTPVersionNotSupported:
		code = "http_version_not_supported"
	}
	msg := string(body)
	if msg == "" {
		msg = string(line)
	}
	if status == http.StatusRequestHeaderFieldsTooLarge {
		msg = "request headers are too large"
	}
	return cannedResponse(status, code, msg, "")
}

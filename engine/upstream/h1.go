package upstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// h1Client is a small HTTP/1.1 client for plain-http upstreams (vLLM,
// SGLang on the cluster network): one POST with a JSON body, the whole
// answer read back, kept-alive connections reused. It does on the calling
// goroutine what net/http's Transport hands between three (caller,
// writeLoop, readLoop), which is most of a call's cost when the upstream
// answers in microseconds. https endpoints and a configured
// Config.HTTPClient use net/http.
type h1Client struct {
	dialer      net.Dialer
	maxIdle     int           // idle connections kept per host
	idleTimeout time.Duration // idle connections older than this are closed, not reused

	mu   sync.Mutex
	idle map[string][]*h1Conn // host:port → idle connections, most recent last
}

type h1Conn struct {
	nc        net.Conn
	br        *bufio.Reader
	hdr       []byte // request buffer, reused
	addr      string
	idleSince time.Time
}

func newH1Client() *h1Client {
	return &h1Client{
		dialer:      net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second},
		maxIdle:     256,
		idleTimeout: 60 * time.Second,
		idle:        map[string][]*h1Conn{},
	}
}

// h1Target is a parsed plain-http URL.
type h1Target struct {
	addr string // host:port to dial
	host string // Host header
	path string // request target, "/" when empty
}

// parseH1 splits an http:// URL; ok is false for anything else (https,
// user info), which goes to net/http.
func parseH1(url string) (t h1Target, ok bool) {
	rest, found := strings.CutPrefix(url, "http://")
	if !found {
		return t, false
	}
	host, path := rest, "/"
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		host, path = rest[:i], rest[i:]
		if path[0] == '?' {
			path = "/" + path
		}
	}
	if host == "" || strings.ContainsAny(host, "@ \t\r\n") || strings.ContainsAny(path, " \t\r\n#") {
		return t, false
	}
	t.host, t.path, t.addr = host, path, host
	if _, port, err := net.SplitHostPort(host); err != nil || port == "" {
		if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") || !strings.Contains(host, ":") {
			t.addr = net.JoinHostPort(strings.Trim(host, "[]"), "80")
		} else {
			return t, false
		}
	}
	return t, true
}

// errNothingRead marks a failure on a reused connection before any byte of
// the answer came back: the server had closed it while idle, and the
// request is sent again on a fresh connection.
var errNothingRead = errors.New("connection closed before an answer")

// post sends body to t and returns the answer's body, status and
// Retry-After. A reused connection that turns out closed is replaced once.
func (c *h1Client) post(ctx context.Context, t h1Target, key string, body []byte) ([]byte, int, time.Duration, error) {
	for attempt := 0; ; attempt++ {
		pc, reused, err := c.get(ctx, t.addr)
		if err != nil {
			return nil, 0, 0, err
		}
		out, status, ra, keep, err := c.roundTrip(ctx, pc, t, key, body, reused)
		if err == nil && keep {
			c.put(pc)
		} else {
			pc.nc.Close()
		}
		if errors.Is(err, errNothingRead) && attempt == 0 && ctx.Err() == nil {
			// The server dropped idle connections: the others pooled with
			// this one are likely gone too, so the retry dials.
			c.dropIdle(t.addr)
			continue
		}
		return out, status, ra, err
	}
}

func (c *h1Client) get(ctx context.Context, addr string) (*h1Conn, bool, error) {
	now := time.Now()
	c.mu.Lock()
	for l := c.idle[addr]; len(l) > 0; l = c.idle[addr] {
		pc := l[len(l)-1]
		c.idle[addr] = l[:len(l)-1]
		if now.Sub(pc.idleSince) < c.idleTimeout {
			c.mu.Unlock()
			return pc, true, nil
		}
		pc.nc.Close()
	}
	c.mu.Unlock()
	nc, err := c.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	return &h1Conn{nc: nc, br: bufio.NewReaderSize(nc, 16<<10), addr: addr}, false, nil
}

// dropIdle closes the idle connections to addr.
func (c *h1Client) dropIdle(addr string) {
	c.mu.Lock()
	l := c.idle[addr]
	delete(c.idle, addr)
	c.mu.Unlock()
	for _, pc := range l {
		pc.nc.Close()
	}
}

func (c *h1Client) put(pc *h1Conn) {
	pc.idleSince = time.Now()
	c.mu.Lock()
	l := c.idle[pc.addr]
	if len(l) >= c.maxIdle {
		c.mu.Unlock()
		pc.nc.Close()
		return
	}
	c.idle[pc.addr] = append(l, pc)
	c.mu.Unlock()
}

// aLongTimeAgo is a deadline that makes blocked reads and writes return.
var aLongTimeAgo = time.Unix(1, 0)

// roundTrip writes the request and reads the answer on pc. keep reports
// whether pc can carry another request.
func (c *h1Client) roundTrip(ctx context.Context, pc *h1Conn, t h1Target, key string, body []byte, reused bool) (out []byte, status int, retryAfter time.Duration, keep bool, err error) {
	stop := context.AfterFunc(ctx, func() { pc.nc.SetDeadline(aLongTimeAgo) })
	defer func() {
		if !stop() {
			// The context ended during the call: the connection's deadline
			// is poisoned, and the caller wants the context's error.
			keep = false
			if err == nil || ctx.Err() != nil {
				err = ctx.Err()
			}
		}
	}()

	h := pc.hdr[:0]
	h = append(h, "POST "...)
	h = append(h, t.path...)
	h = append(h, " HTTP/1.1\r\nHost: "...)
	h = append(h, t.host...)
	h = append(h, "\r\nUser-Agent: agl\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: "...)
	h = strconv.AppendInt(h, int64(len(body)), 10)
	if key != "" {
		h = append(h, "\r\nAuthorization: Bearer "...)
		h = append(h, key...)
	}
	h = append(h, "\r\n\r\n"...)
	// One write of head and body, copied together: net.Buffers (writev)
	// would save the copy but carries no race-detector synchronization,
	// so a server in the same process would see false races.
	h = append(h, body...)
	if cap(h) <= 64<<10 { // idle connections keep small buffers only
		pc.hdr = h[:0]
	} else {
		pc.hdr = nil
	}
	if _, err := pc.nc.Write(h); err != nil {
		if reused {
			err = fmt.Errorf("%w: %w", errNothingRead, err)
		}
		return nil, 0, 0, false, err
	}

	resp, err := readResponse(pc.br, reused)
	if err != nil {
		return nil, 0, 0, false, err
	}
	return resp.body, resp.status, resp.retryAfter, resp.keepAlive, nil
}

type h1Response struct {
	status     int
	body       []byte
	retryAfter time.Duration
	keepAlive  bool
}

// readResponse reads one answer: status line, headers, a body framed by
// Content-Length, chunked encoding or the end of the connection. 1xx
// answers are skipped.
func readResponse(br *bufio.Reader, reused bool) (r h1Response, err error) {
	first := true
	for {
		line, err := readLine(br)
		if err != nil {
			if first && reused && (errors.Is(err, io.EOF) || isConnReset(err)) {
				err = fmt.Errorf("%w: %w", errNothingRead, err)
			}
			return r, fmt.Errorf("read upstream answer: %w", err)
		}
		first = false
		proto, rest, _ := strings.Cut(line, " ")
		code, _, _ := strings.Cut(rest, " ")
		if !strings.HasPrefix(proto, "HTTP/1.") || len(code) != 3 {
			return r, fmt.Errorf("read upstream answer: malformed status line %q", truncate(line, 64))
		}
		r.status, err = strconv.Atoi(code)
		if err != nil || r.status < 100 {
			return r, fmt.Errorf("read upstream answer: malformed status line %q", truncate(line, 64))
		}
		r.keepAlive = proto == "HTTP/1.1"
		length, chunked := int64(-1), false
		for {
			hl, err := readLine(br)
			if err != nil {
				return r, fmt.Errorf("read upstream answer headers: %w", err)
			}
			if hl == "" {
				break
			}
			name, value, ok := strings.Cut(hl, ":")
			if !ok {
				return r, fmt.Errorf("read upstream answer: malformed header line %q", truncate(hl, 64))
			}
			value = strings.TrimSpace(value)
			switch {
			case strings.EqualFold(name, "Content-Length"):
				n, err := strconv.ParseInt(value, 10, 64)
				if err != nil || n < 0 || (length >= 0 && n != length) {
					return r, fmt.Errorf("read upstream answer: bad Content-Length %q", truncate(value, 32))
				}
				length = n
			case strings.EqualFold(name, "Transfer-Encoding"):
				if !strings.EqualFold(value, "chunked") {
					return r, fmt.Errorf("read upstream answer: unsupported Transfer-Encoding %q", truncate(value, 32))
				}
				chunked = true
			case strings.EqualFold(name, "Connection"):
				for _, tok := range strings.Split(value, ",") {
					switch strings.ToLower(strings.TrimSpace(tok)) {
					case "close":
						r.keepAlive = false
					case "keep-alive":
						if proto == "HTTP/1.0" {
							r.keepAlive = true
						}
					}
				}
			case strings.EqualFold(name, "Retry-After"):
				if secs, err := strconv.ParseFloat(value, 64); err == nil && secs > 0 {
					r.retryAfter = time.Duration(secs * float64(time.Second))
				}
			}
		}
		if r.status >= 100 && r.status < 200 {
			continue // 100 Continue, 103 Early Hints: the answer follows
		}
		switch {
		case r.status == 204 || r.status == 304:
		case chunked:
			r.body, err = readChunked(br)
		case length >= 0:
			if length > maxResponseBytes {
				return r, fmt.Errorf("read upstream answer: %d bytes, over the %d-byte limit", length, maxResponseBytes)
			}
			r.body = make([]byte, length)
			_, err = io.ReadFull(br, r.body)
		default: // the body runs to the end of the connection
			r.keepAlive = false
			r.body, err = io.ReadAll(io.LimitReader(br, maxResponseBytes+1))
			if err == nil && len(r.body) > maxResponseBytes {
				err = fmt.Errorf("over the %d-byte limit", maxResponseBytes)
			}
		}
		if err != nil {
			return r, fmt.Errorf("read upstream answer body: %w", err)
		}
		return r, nil
	}
}

// readLine returns one CRLF- (or LF-) terminated line without its end.
func readLine(br *bufio.Reader) (string, error) {
	b, err := br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return "", errors.New("header line too long")
		}
		if errors.Is(err, io.EOF) && len(b) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return "", err
	}
	return string(bytes.TrimRight(b, "\r\n")), nil
}

// readChunked decodes a chunked body (RFC 9112 §7.1), trailers skipped.
func readChunked(br *bufio.Reader) ([]byte, error) {
	var out []byte
	for {
		line, err := readLine(br)
		if err != nil {
			return nil, err
		}
		size, _, _ := strings.Cut(line, ";")
		n, err := strconv.ParseInt(strings.TrimSpace(size), 16, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bad chunk size %q", truncate(line, 32))
		}
		if n == 0 {
			for {
				tl, err := readLine(br)
				if err != nil {
					return nil, err
				}
				if tl == "" {
					return out, nil
				}
			}
		}
		if int64(len(out))+n > maxResponseBytes {
			return nil, fmt.Errorf("over the %d-byte limit", maxResponseBytes)
		}
		start := len(out)
		out = append(out, make([]byte, n)...)
		if _, err := io.ReadFull(br, out[start:]); err != nil {
			return nil, err
		}
		if crlf, err := readLine(br); err != nil || crlf != "" {
			if err == nil {
				err = errors.New("chunk not followed by CRLF")
			}
			return nil, err
		}
	}
}

func isConnReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseH1(t *testing.T) {
	cases := []struct {
		url              string
		ok               bool
		addr, host, path string
	}{
		{"http://127.0.0.1:8000/v1/chat/completions", true, "127.0.0.1:8000", "127.0.0.1:8000", "/v1/chat/completions"},
		{"http://vllm.svc/v1/completions", true, "vllm.svc:80", "vllm.svc", "/v1/completions"},
		{"http://[::1]:9000/x", true, "[::1]:9000", "[::1]:9000", "/x"},
		{"http://[::1]/x", true, "[::1]:80", "[::1]", "/x"},
		{"http://h:1", true, "h:1", "h:1", "/"},
		{"http://h:1?a=b", true, "h:1", "h:1", "/?a=b"},
		{"https://api.openai.com/v1/chat/completions", false, "", "", ""},
		{"http://user:pw@h/x", false, "", "", ""},
		{"http:///x", false, "", "", ""},
		{"http://h/a b", false, "", "", ""},
		{"http://h:/x", false, "", "", ""},
	}
	for _, c := range cases {
		got, ok := parseH1(c.url)
		if ok != c.ok || (ok && (got.addr != c.addr || got.host != c.host || got.path != c.path)) {
			t.Errorf("parseH1(%q) = %+v, %v; want {%s %s %s}, %v", c.url, got, ok, c.addr, c.host, c.path, c.ok)
		}
	}
}

// countingServer is a real net/http server that counts the connections
// opened to it.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func mustTarget(t *testing.T, url string) h1Target {
	t.Helper()
	tg, ok := parseH1(url)
	if !ok {
		t.Fatalf("parseH1(%q) failed", url)
	}
	return tg
}

func TestH1KeepAliveAndRequestShape(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Method != "POST" || r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer k1" ||
			r.Header.Get("Content-Type") != "application/json" || r.Host != strings.TrimPrefix(srvURL(r), "http://") {
			http.Error(w, fmt.Sprintf("bad request shape: %s %s %q %q", r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Host), 400)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"echo":%s}`, b)
	})
	c := newH1Client()
	tg := mustTarget(t, srv.URL+"/v1/chat/completions")
	for i := range 50 {
		body := fmt.Sprintf(`{"i":%d}`, i)
		out, status, _, err := c.post(context.Background(), tg, "k1", []byte(body))
		if err != nil || status != 200 || string(out) != `{"echo":`+body+`}` {
			t.Fatalf("call %d: %d %q %v", i, status, out, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("50 sequential calls opened %d connections, want 1 (keep-alive)", n)
	}
}

func srvURL(r *http.Request) string {
	return "http://" + r.Context().Value(http.LocalAddrContextKey).(net.Addr).String()
}

func TestH1ChunkedAndClose(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/chunked": // no Content-Length and a flush: net/http sends chunks
			for i := range 3 {
				fmt.Fprintf(w, "part%d;", i)
				w.(http.Flusher).Flush()
			}
		case "/close":
			w.Header().Set("Connection", "close")
			io.WriteString(w, "bye")
		}
	})
	c := newH1Client()
	out, status, _, err := c.post(context.Background(), mustTarget(t, srv.URL+"/chunked"), "", []byte("{}"))
	if err != nil || status != 200 || string(out) != "part0;part1;part2;" {
		t.Fatalf("chunked: %d %q %v", status, out, err)
	}
	for range 2 {
		out, status, _, err = c.post(context.Background(), mustTarget(t, srv.URL+"/close"), "", []byte("{}"))
		if err != nil || status != 200 || string(out) != "bye" {
			t.Fatalf("close: %d %q %v", status, out, err)
		}
	}
	// The chunked call's connection is reused by the first /close call,
	// which closes it; the second /close needs a new one.
	if n := conns.Load(); n != 2 {
		t.Errorf("connections = %d, want 2", n)
	}
}

// rawServer answers every connection with handle, on loopback.
func rawServer(t *testing.T, handle func(net.Conn, *bufio.Reader)) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				handle(nc, bufio.NewReader(nc))
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/v1/completions"
}

// readRequest consumes one request (head and Content-Length body).
func readRequest(br *bufio.Reader) error {
	req, err := http.ReadRequest(br)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, req.Body)
	return err
}

func TestH1RawAnswers(t *testing.T) {
	cases := []struct {
		name    string
		answer  string
		status  int
		body    string
		retry   time.Duration
		wantErr string
	}{
		{"until EOF", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"a\":1}", 200, `{"a":1}`, 0, ""},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, "ok", 0, ""},
		{"100 Continue first", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, "ok", 0, ""},
		{"429 Retry-After", "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 2\r\nContent-Length: 4\r\n\r\nbusy", 429, "busy", 2 * time.Second, ""},
		{"chunk extension and trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: v\r\n\r\n", 200, "abc", 0, ""},
		{"LF only", "HTTP/1.1 200 OK\nContent-Length: 2\n\nok", 200, "ok", 0, ""},
		{"garbage status", "SSH-2.0-OpenSSH\r\n\r\n", 0, "", 0, "malformed status line"},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: -3\r\n\r\n", 0, "", 0, "bad Content-Length"},
		{"conflicting lengths", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok", 0, "", 0, "bad Content-Length"},
		{"gzip encoding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", 0, "", 0, "unsupported Transfer-Encoding"},
		{"too large", "HTTP/1.1 200 OK\r\nContent-Length: 999999999999\r\n\r\n", 0, "", 0, "over the"},
		{"short body", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 0, "", 0, "unexpected EOF"},
		{"bad chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 0, "", 0, "bad chunk size"},
		{"header without colon", "HTTP/1.1 200 OK\r\nnonsense\r\n\r\n", 0, "", 0, "malformed header line"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url := rawServer(t, func(nc net.Conn, br *bufio.Reader) {
				if readRequest(br) == nil {
					io.WriteString(nc, tc.answer)
				}
			})
			out, status, ra, err := newH1Client().post(context.Background(), mustTarget(t, url), "", []byte(`{"prompt":"x"}`))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || status != tc.status || string(out) != tc.body || ra != tc.retry {
				t.Fatalf("got %d %q retry-after %v err %v; want %d %q %v", status, out, ra, err, tc.status, tc.body, tc.retry)
			}
		})
	}
}

// TestH1StaleConnectionResent: a server that closes kept-alive connections
// while they are idle (as uvicorn does after 5 s) costs no failed call: the
// request goes again on a fresh connection.
func TestH1StaleConnectionResent(t *testing.T) {
	var conns, requests atomic.Int64
	url := rawServer(t, func(nc net.Conn, br *bufio.Reader) {
		conns.Add(1)
		if readRequest(br) != nil {
			return
		}
		requests.Add(1)
		// Answer as if keeping the connection alive, then close it.
		io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	c := newH1Client()
	tg := mustTarget(t, url)
	for i := range 5 {
		out, status, _, err := c.post(context.Background(), tg, "", []byte("{}"))
		if err != nil || status != 200 || string(out) != "ok" {
			t.Fatalf("call %d: %d %q %v", i, status, out, err)
		}
		time.Sleep(10 * time.Millisecond) // let the close arrive
	}
	if r, n := requests.Load(), conns.Load(); r != 5 || n < 5 {
		t.Errorf("%d requests answered on %d connections, want 5 on ≥5", r, n)
	}
}

// TestH1ManyStaleConnections: after a server dropped every kept-alive
// connection, one call still succeeds (the pool is emptied, the resend
// dials) instead of meeting the next stale connection.
func TestH1ManyStaleConnections(t *testing.T) {
	var conns atomic.Int64
	closeAll := make(chan struct{})
	url := rawServer(t, func(nc net.Conn, br *bufio.Reader) {
		conns.Add(1)
		if readRequest(br) != nil {
			return
		}
		time.Sleep(20 * time.Millisecond) // keep the calls concurrent
		io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		<-closeAll // then drop the idle connection
	})
	c := newH1Client()
	tg := mustTarget(t, url)
	done := make(chan error, 4)
	for range 4 {
		go func() {
			_, _, _, err := c.post(context.Background(), tg, "", []byte("{}"))
			done <- err
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n := len(c.idle[tg.addr]); n != 4 {
		t.Fatalf("%d idle connections, want 4", n)
	}
	close(closeAll)
	time.Sleep(20 * time.Millisecond)
	out, status, _, err := c.post(context.Background(), tg, "", []byte("{}"))
	if err != nil || status != 200 || string(out) != "ok" {
		t.Fatalf("after the server dropped its connections: %d %q %v", status, out, err)
	}
	if n := conns.Load(); n != 5 {
		t.Errorf("%d connections, want 5 (4, then one fresh)", n)
	}
}

// TestH1NoResendOnFreshConnection: a fresh connection that fails is an
// error for the caller's retry policy, not silently sent again.
func TestH1NoResendOnFreshConnection(t *testing.T) {
	var conns atomic.Int64
	url := rawServer(t, func(nc net.Conn, br *bufio.Reader) {
		conns.Add(1)
		readRequest(br) // and close without answering
	})
	_, _, _, err := newH1Client().post(context.Background(), mustTarget(t, url), "", []byte("{}"))
	if err == nil || !errors.Is(err, io.EOF) {
		t.Fatalf("err = %v, want EOF", err)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

func TestH1ContextCancel(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/slow" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		io.WriteString(w, "ok")
	})
	c := newH1Client()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, _, err := c.post(ctx, mustTarget(t, srv.URL+"/slow"), "", []byte("{}"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancel took %v", d)
	}
	// The interrupted connection is not reused: the next call dials anew.
	out, status, _, err := c.post(context.Background(), mustTarget(t, srv.URL+"/fast"), "", []byte("{}"))
	if err != nil || status != 200 || string(out) != "ok" {
		t.Fatalf("after cancel: %d %q %v", status, out, err)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("connections = %d, want 2", n)
	}
}

package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/gateway"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/store"
)

// serveLimited runs a Server on a real loopback listener; mount may add
// handlers before it serves.
func serveLimited(t testing.TB, opt gateway.Options, mount func(*gateway.Server)) string {
	t.Helper()
	if opt.AdminKey == "" {
		opt.AdminKey = admin
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := gateway.New(opt)
	if mount != nil {
		mount(srv)
	}
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(c, ln, 5*time.Second, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	return ln.Addr().String()
}

// rawRequest sends raw bytes on a fresh connection and reads one answer.
func rawRequest(t *testing.T, addr string, raw string) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

// TestRefusalsAreJSON: every refusal, including those net/http makes
// before any handler runs and those of the connection cap, is an HTTP
// answer in the {"error":{"code","message"}} shape.
func TestRefusalsAreJSON(t *testing.T) {
	t.Parallel()
	st := testutil.SQLite(t)
	addr := serveLimited(t, gateway.Options{Store: st, MaxBodyBytes: 1 << 10, Limits: gateway.Limits{
		MaxHeaderBytes: 1 << 10, ReadBodyTimeout: 300 * time.Millisecond,
	}}, func(s *gateway.Server) {
		s.Handle("GET /test/panic", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	})
	auth := "Authorization: Bearer " + admin + "\r\n"
	chunked := "POST /api/rollouts HTTP/1.1\r\nHost: x\r\n" + auth + "Transfer-Encoding: chunked\r\n\r\n" +
		"800\r\n" + `{"rollouts":[{"task":"` + strings.Repeat("x", 2048-22) + `"}]}` + "\r\n0\r\n\r\n"
	cases := []struct {
		name, raw string
		status    int
		code      string
	}{
		{"header too large", "GET /api/health HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("y", 8<<10) + "\r\n\r\n", 431, "header_too_large"},
		{"malformed request", "NOT HTTP\r\n\r\n", 400, "bad_request"},
		{"unsupported transfer encoding", "POST /api/rollouts HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "not_implemented"},
		{"panic", "GET /test/panic HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n", 500, "internal"},
		{"oversized chunked body", chunked, 413, "too_large"},
		{"body never sent", "POST /api/rollouts HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: 100\r\n\r\n{", 408, "request_timeout"},
		{"unauthenticated, body never sent", "POST /api/rollouts HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n", 401, "unauthorized"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawRequest(t, addr, tc.raw)
			var e api.ErrorBody
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("%d answer is not the JSON error shape: %q", resp.StatusCode, body)
			}
			if resp.StatusCode != tc.status || e.Error.Code != tc.code || e.Error.Message == "" {
				t.Errorf("got %d %+v, want %d %s", resp.StatusCode, e.Error, tc.status, tc.code)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("content type %q", ct)
			}
		})
	}
	if rs, _, _ := st.ListRollouts(ctx(t), store.RolloutFilter{}); len(rs) != 0 {
		t.Errorf("refused requests stored %d rollouts", len(rs))
	}
}

func TestPerIPConnectionCap(t *testing.T) {
	addr := serveLimited(t, gateway.Options{Store: testutil.SQLite(t), Limits: gateway.Limits{MaxConnsPerIP: 4}}, nil)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	// Hold the cap's worth of connections, each with one request served
	// so that the server has surely accepted it.
	for range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		io.WriteString(c, "GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("held connection: %v %v", resp, err)
		}
	}
	resp, body := rawRequest(t, addr, "GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n")
	var e api.ErrorBody
	if json.Unmarshal(body, &e) != nil || resp.StatusCode != 503 || e.Error.Code != "too_many_connections" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("over the cap: %d %q", resp.StatusCode, body)
	}
	// Another address is not affected by this one's cap.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	c2, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("no second loopback address: %v", err)
	}
	defer c2.Close()
	io.WriteString(c2, "GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(c2), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("from 127.0.0.2: %v %v", resp, err)
	}
	// Closing a held connection frees its slot.
	held[0].Close()
	held = held[1:]
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, _ := rawRequest(t, addr, "GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot not freed: %d", resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestTotalConnectionCap(t *testing.T) {
	addr := serveLimited(t, gateway.Options{Store: testutil.SQLite(t), Limits: gateway.Limits{MaxConns: 3, MaxConnsPerIP: -1}}, nil)
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("held connection: %v %v", resp, err)
		}
	}
	resp, body := rawRequest(t, addr, "GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 503 || !strings.Contains(string(body), "too_many_connections") {
		t.Fatalf("over the total cap: %d %q", resp.StatusCode, body)
	}
}

// hostile is one kind of slow or idle client.
type hostile struct {
	name string
	// start opens the connection's abuse; it returns when the client has
	// sent all it will send.
	start func(c net.Conn) error
	// limit is the configured timeout that must cut it.
	limit time.Duration
}

func hostileKinds(lim gateway.Limits, slowEvery time.Duration) []hostile {
	send := func(s string) func(net.Conn) error {
		return func(c net.Conn) error { _, err := io.WriteString(c, s); return err }
	}
	return []hostile{
		// Cut at once: refused without reading the body, connection closed.
		{"unauthenticated, declared body never sent", send("POST /api/rollouts HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n"), lim.ReadBodyTimeout},
		{"authenticated, declared body never sent", send("POST /api/rollouts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + admin + "\r\nContent-Length: 1000\r\n\r\n{"), lim.ReadBodyTimeout},
		{"idle keep-alive", func(c net.Conn) error {
			if _, err := io.WriteString(c, "GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				return err
			}
			// Read the answer so that the connection is idle, not writing.
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return err
			}
			io.Copy(io.Discard, resp.Body)
			return resp.Body.Close()
		}, lim.IdleTimeout},
		{"slowloris headers", func(c net.Conn) error {
			if _, err := io.WriteString(c, "GET /api/health HTTP/1.1\r\nHost: x\r\n"); err != nil {
				return err
			}
			// One header byte every slowEvery, forever (until cut).
			go func() {
				for {
					time.Sleep(slowEvery)
					if _, err := io.WriteString(c, "X"); err != nil {
						return
					}
				}
			}()
			return nil
		}, lim.ReadHeaderTimeout},
		{"connected, silent", send(""), lim.ReadHeaderTimeout},
	}
}

// TestSlowClientsAreCut: 200 slow and idle connections, 40 of each kind
// above, are all cut within their configured timeout (plus scheduling
// slack), while authenticated calls keep being answered.
func TestSlowClientsAreCut(t *testing.T) {
	lim := gateway.Limits{ReadHeaderTimeout: 500 * time.Millisecond, ReadBodyTimeout: 500 * time.Millisecond,
		WriteTimeout: 2 * time.Second, IdleTimeout: 500 * time.Millisecond}
	addr := serveLimited(t, gateway.Options{Store: testutil.SQLite(t), Limits: lim}, nil)
	kinds := hostileKinds(lim, 100*time.Millisecond)
	const perKind = 40
	const slack = 2 * time.Second // a loaded 2-core machine running -race
	type result struct {
		kind int
		cut  time.Duration
		err  error
	}
	results := make(chan result, perKind*len(kinds))
	var wg sync.WaitGroup
	for k, h := range kinds {
		for range perKind {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := net.Dial("tcp", addr)
				if err != nil {
					results <- result{k, 0, err}
					return
				}
				defer c.Close()
				if err := h.start(c); err != nil {
					results <- result{k, 0, fmt.Errorf("start: %w", err)}
					return
				}
				began := time.Now()
				// Read until the server closes the connection (answers, if
				// any, are discarded); give up well after the limit.
				c.SetReadDeadline(time.Now().Add(h.limit + 10*time.Second))
				_, err = io.Copy(io.Discard, c)
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					results <- result{k, 0, fmt.Errorf("still open after %s", time.Since(began).Round(time.Millisecond))}
					return
				}
				results <- result{k, time.Since(began), nil}
			}()
		}
	}
	// Authenticated calls are served meanwhile.
	cl := api.NewClient("http://"+addr, admin)
	for i := range 20 {
		if _, err := cl.CreateRollouts(ctx(t), []store.NewRollout{{ID: fmt.Sprintf("r%d", i)}}); err != nil {
			t.Fatalf("authenticated call during the load: %v", err)
		}
	}
	wg.Wait()
	close(results)
	cuts := make([][]time.Duration, len(kinds))
	for r := range results {
		if r.err != nil {
			t.Errorf("%s: %v", kinds[r.kind].name, r.err)
			continue
		}
		cuts[r.kind] = append(cuts[r.kind], r.cut)
	}
	for k, h := range kinds {
		if len(cuts[k]) == 0 {
			continue
		}
		slices.Sort(cuts[k])
		worst := cuts[k][len(cuts[k])-1]
		t.Logf("%-45s %d connections cut: p50 %s, max %s (limit %s)", h.name, len(cuts[k]), cuts[k][len(cuts[k])/2].Round(time.Millisecond), worst.Round(time.Millisecond), h.limit)
		if worst > h.limit+slack {
			t.Errorf("%s: cut after %s, limit %s", h.name, worst, h.limit)
		}
	}
}

// TestLongStreamNotCutByWriteTimeout: an answer written over longer than
// the write timeout, as a long streaming LLM call is, arrives whole; a
// body read deadline does not cancel a long call once its body is read.
func TestLongStreamNotCutByWriteTimeout(t *testing.T) {
	lim := gateway.Limits{WriteTimeout: 300 * time.Millisecond, ReadBodyTimeout: 300 * time.Millisecond}
	addr := serveLimited(t, gateway.Options{Store: testutil.SQLite(t), Limits: lim}, func(s *gateway.Server) {
		s.Handle("POST /test/stream", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 10 {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
				fmt.Fprintf(w, "data: %d\n\n", i)
				w.(http.Flusher).Flush()
			}
			io.WriteString(w, "data: [DONE]\n\n")
		}))
	})
	resp, err := http.Post("http://"+addr+"/test/stream", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || !strings.HasSuffix(string(body), "data: [DONE]\n\n") || strings.Count(string(body), "data:") != 11 {
		t.Fatalf("stream of 1s cut: %v %q", err, body)
	}
}

// BenchmarkAuthenticatedUnderSlowClients: the latency of an authenticated
// API call (create one rollout) with no other client, and while 200 slow
// and idle connections (40 of each hostile kind, reconnecting a second
// after being cut) are open under the default limits. Reports p50 and p99
// in µs, and held-conns: how many hostile connections were open at the end
// (the unauthenticated ones are cut at once, so fewer than 200).
func BenchmarkAuthenticatedUnderSlowClients(b *testing.B) {
	for _, load := range []int{0, 200} {
		b.Run(fmt.Sprintf("hostile=%d", load), func(b *testing.B) {
			st := testutil.SQLite(b)
			lim := gateway.DefaultLimits
			addr := serveLimited(b, gateway.Options{Store: st, Limits: lim}, nil)
			stop := make(chan struct{})
			var open atomic.Int64
			var wg sync.WaitGroup
			var held sync.WaitGroup
			kinds := hostileKinds(lim, time.Second)
			held.Add(load)
			for i := range load {
				h := kinds[i%len(kinds)]
				wg.Add(1)
				go func() {
					defer wg.Done()
					first := true
					for {
						c, err := net.Dial("tcp", addr)
						if err == nil {
							h.start(c)
						}
						if first {
							held.Done()
							first = false
						}
						if err == nil {
							open.Add(1)
							go func() { <-stop; c.Close() }()
							io.Copy(io.Discard, c)
							c.Close()
							open.Add(-1)
						}
						select {
						case <-stop:
							return
						case <-time.After(time.Second):
						}
					}
				}()
			}
			held.Wait()
			cl := api.NewClient("http://"+addr, admin)
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				t0 := time.Now()
				if _, err := cl.CreateRollouts(ctx, []store.NewRollout{{ID: fmt.Sprintf("r%d", i)}}); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			heldConns := open.Load()
			close(stop)
			wg.Wait()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(heldConns), "held-conns")
		})
	}
}

// TestEventCountCap: the /api events route takes at most
// store.MaxEventsPerRequest events per request, as /r/…/events does.
func TestEventCountCap(t *testing.T) {
	srv, st := newServer(t, gateway.Options{})
	// 400,000 events take about 20 s to encode and refuse under -race on
	// an idle 2-core machine and twice that beside other test binaries:
	// the deadline is a hang guard, not a speed check.
	c, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st.CreateRollouts(c, []store.NewRollout{{ID: "r"}})
	cl, _ := st.Claim(c, store.ClaimRequest{})
	k := api.NewClient(srv.URL, cl.Key)
	for _, tc := range []struct {
		n    int
		want int
	}{{store.MaxEventsPerRequest, 200}, {store.MaxEventsPerRequest + 1, 400}, {400000, 400}} {
		evs := make([]store.NewEvent, tc.n)
		for i := range evs {
			evs[i] = store.NewEvent{Type: "log"}
		}
		_, err := k.AppendEvents(c, "r", cl.Attempt.ID, evs)
		if got := statusOf(err); (tc.want == 200) != (err == nil) || err != nil && got != tc.want {
			t.Errorf("%d events: %v, want %d", tc.n, err, tc.want)
		}
	}
	if evs, _ := st.ListEvents(c, store.EventFilter{RolloutID: "r", Limit: 5000}); len(evs) != store.MaxEventsPerRequest {
		t.Errorf("%d events stored, want %d", len(evs), store.MaxEventsPerRequest)
	}
}

// TestAuthHeaderPrecedence: one rule for every route: Authorization: Bearer
// or x-api-key; both only with the same key; a non-Bearer Authorization is
// ignored.
func TestAuthHeaderPrecedence(t *testing.T) {
	t.Parallel()
	srv, st := newServer(t, gateway.Options{})
	c := ctx(t)
	st.CreateRollouts(c, []store.NewRollout{{ID: "r"}})
	cl, _ := st.Claim(c, store.ClaimRequest{})
	hb := "/api/rollouts/r/attempts/" + cl.Attempt.ID + "/heartbeat"
	for _, tc := range []struct {
		name, path string
		hdr        map[string]string
		want       int
	}{
		{"admin bearer", "/api/rollouts", map[string]string{"Authorization": "Bearer " + admin}, 200},
		{"admin x-api-key", "/api/rollouts", map[string]string{"x-api-key": admin}, 200},
		{"admin in both", "/api/rollouts", map[string]string{"Authorization": "Bearer " + admin, "x-api-key": admin}, 200},
		{"admin and another key", "/api/rollouts", map[string]string{"Authorization": "Bearer " + admin, "x-api-key": "other"}, 401},
		{"another key and admin", "/api/rollouts", map[string]string{"Authorization": "Bearer other", "x-api-key": admin}, 401},
		{"basic auth ignored, x-api-key used", "/api/rollouts", map[string]string{"Authorization": "Basic eDp5", "x-api-key": admin}, 200},
		{"scoped bearer", hb, map[string]string{"Authorization": "Bearer " + cl.Key}, 200},
		{"scoped x-api-key", hb, map[string]string{"x-api-key": cl.Key}, 200},
		{"scoped and admin", hb, map[string]string{"Authorization": "Bearer " + admin, "x-api-key": cl.Key}, 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := "GET"
			if tc.path == hb {
				method = "POST"
			}
			req, _ := http.NewRequest(method, srv.URL+tc.path, nil)
			for k, v := range tc.hdr {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.want, body)
			}
			if tc.want == 401 && !strings.Contains(string(body), "different keys") {
				t.Errorf("401 does not say why: %s", body)
			}
		})
	}
}

// TestRefusedBeforeBodyClosedAtOnce: a request refused before its body is
// read (401 unauthenticated) is answered and its
// connection closed at once, not held until the body's read timeout,
// whatever the declared body's size, sent or not.
func TestRefusedBeforeBodyClosedAtOnce(t *testing.T) {
	lim := gateway.Limits{ReadBodyTimeout: 30 * time.Second}
	addr := serveLimited(t, gateway.Options{Store: testutil.SQLite(t), Limits: lim}, nil)
	for _, tc := range []struct {
		name, req string
		want      int
	}{
		{"401, small body never sent", "POST /api/rollouts HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n", 401},
		{"401, large body never sent", "POST /api/rollouts HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n", 401},
		{"401, body half sent", "POST /api/rollouts HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"a\":", 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			began := time.Now()
			if _, err := io.WriteString(c, tc.req); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.want || !strings.Contains(string(body), `"error"`) {
				t.Fatalf("answer %d %s, want %d in the JSON error shape", resp.StatusCode, body, tc.want)
			}
			_, err = io.Copy(io.Discard, br)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("connection still open %s after the answer", time.Since(began).Round(time.Millisecond))
			}
			if d := time.Since(began); d > 2*time.Second {
				t.Errorf("connection closed after %s, want at once", d.Round(time.Millisecond))
			}
		})
	}
}

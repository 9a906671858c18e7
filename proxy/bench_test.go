package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
)

// benchBody is a typical harness request: system prompt, a tool, a user turn.
var benchBody = []byte(`{"model":"Qwen/Qwen3-8B","messages":[{"role":"system","content":"You are a helpful coding agent. Use the tools to inspect the repository before answering."},` +
	`{"role":"user","content":"Find the function that parses the config file and explain what happens when the file is missing."}],` +
	`"tools":[{"type":"function","function":{"name":"read_file","description":"Read a file of the repository","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}}],` +
	`"temperature":1.0,"max_tokens":512}`)

// zeroUpstream is a zero-think-time OpenAI-compatible server: it reads the
// request and answers a fixed vLLM-format completion.
func zeroUpstream(b *testing.B) *httptest.Server {
	answer := []byte(vllmAnswer)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
		w.Write(answer)
	}))
	b.Cleanup(srv.Close)
	return srv
}

func benchClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
	}}
}

// target is where one client sends its calls.
type target struct{ url, key string }

// load sends n calls from len(ts) concurrent clients, client i calling
// ts[i], and returns each call's latency and the wall time.
func load(b *testing.B, hc *http.Client, ts []target, n int) ([]time.Duration, time.Duration) {
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	start := time.Now()
	for _, tg := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				req, _ := http.NewRequest("POST", tg.url, bytes.NewReader(benchBody))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+tg.key)
				t0 := time.Now()
				resp, err := hc.Do(req)
				if err != nil {
					failed.Store(err.Error())
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lat[i] = time.Since(t0)
				if resp.StatusCode != 200 {
					failed.Store("status " + resp.Status)
					return
				}
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f != nil {
		b.Fatal(f)
	}
	return lat, time.Since(start)
}

// cpuTime is the CPU time (user and system) the process used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func pct(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

// BenchmarkOverhead measures what the gateway adds to calling the same
// zero-think-time upstream directly, with every call's model_request event
// persisted to SQLite: added latency p50/p99 and calls per second, at 1 and
// 32 concurrent clients. Each b.N round runs b.N direct calls then b.N
// gateway calls, alternating in four rounds, so that load from other
// processes on the machine hits both alike; compare ratios, not absolute
// figures.
//
// The store=none variants drop the events (same gateway, no persistence):
// the difference to store=sqlite is what persisting costs. The
// gateway=passthrough variants replace agl with the least an HTTP gateway
// on net/http does (read the body, POST it upstream on a pooled client,
// copy the answer back): the floor of any such gateway on this machine,
// with client, gateway and upstream sharing its cores. The gateway=relay
// variants go lower still: a raw TCP relay of the bytes (see relay), the
// floor of any HTTP gateway whatever its server.
//
// The process's CPU time per call in the direct and the gateway rounds
// (client, gateway and upstream together) tells what a machine whose
// cores are all busy sees: there calls/s follow CPU per call, which other
// load on the machine changes much less than it changes wall times.
//
//	go test -run '^$' -bench Overhead -benchtime 4000x ./proxy
func BenchmarkOverhead(b *testing.B) {
	for _, gw := range []string{"sqlite", "none", "passthrough", "relay"} {
		for _, clients := range []int{1, 32} {
			name := "gateway=agl/store=" + gw + "/clients=" + strconv.Itoa(clients)
			if gw == "passthrough" || gw == "relay" {
				name = "gateway=" + gw + "/clients=" + strconv.Itoa(clients)
			}
			b.Run(name, func(b *testing.B) { benchOverhead(b, clients, gw) })
		}
	}
}

// dropEvents is a store that forgets appended events.
type dropEvents struct{ store.Store }

func (d dropEvents) AppendEvents(ctx context.Context, rid, aid string, evs []store.NewEvent) ([]store.Event, error) {
	return make([]store.Event, len(evs)), nil
}

// passthrough is a minimal HTTP gateway: it forwards the body to upstream
// and copies the answer back.
func passthrough(upstreamURL string) http.Handler {
	hc := benchClient()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req, _ := http.NewRequestWithContext(r.Context(), "POST", upstreamURL, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(out)))
		w.Write(out)
	})
}

// relay is the floor of any HTTP gateway on this machine: a TCP relay that
// reads one HTTP/1.1 request (head and Content-Length body), writes it
// unchanged on its own kept-alive upstream connection and copies the
// answer back: no header parsing beyond Content-Length, no JSON, no store.
// It returns the relay's base URL.
func relay(b *testing.B, upstreamAddr string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var (
		conns sync.WaitGroup
		mu    sync.Mutex
		open  []net.Conn
	)
	b.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		conns.Wait()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			conns.Add(1)
			go func() {
				defer conns.Done()
				relayConn(c, upstreamAddr)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

func relayConn(c net.Conn, upstreamAddr string) {
	defer c.Close()
	u, err := net.Dial("tcp", upstreamAddr)
	if err != nil {
		return
	}
	defer u.Close()
	cr, ur := bufio.NewReader(c), bufio.NewReader(u)
	var buf []byte
	for {
		if buf, err = readMessage(cr, buf[:0]); err != nil {
			return
		}
		if _, err = u.Write(buf); err != nil {
			return
		}
		if buf, err = readMessage(ur, buf[:0]); err != nil {
			return
		}
		if _, err = c.Write(buf); err != nil {
			return
		}
	}
}

// readMessage appends one HTTP/1.1 message with a Content-Length body to
// buf.
func readMessage(r *bufio.Reader, buf []byte) ([]byte, error) {
	n := -1
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return buf, err
		}
		buf = append(buf, line...)
		if len(line) <= 2 {
			break
		}
		if k, v, ok := bytes.Cut(line, []byte(":")); ok && bytes.EqualFold(bytes.TrimSpace(k), []byte("Content-Length")) {
			n, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
		}
	}
	if n < 0 {
		return buf, errors.New("relay: message without Content-Length")
	}
	start := len(buf)
	buf = slices.Grow(buf, n)[:start+n]
	_, err := io.ReadFull(r, buf[start:])
	return buf, err
}

func benchOverhead(b *testing.B, clients int, gateway string) {
	up := zeroUpstream(b)
	e := newEnv(b, proxy.Config{}, upstreamBackend(b, up.URL))
	switch gateway {
	case "none":
		e.srv.Config.Handler = proxy.New(proxy.Config{}, dropEvents{e.st}, upstreamBackend(b, up.URL))
	case "passthrough":
		e.srv.Config.Handler = passthrough(up.URL + "/v1/chat/completions")
	}
	gwURL := func(cl store.Claim) string { return base(e.srv, cl) }
	if gateway == "relay" {
		addr := relay(b, up.Listener.Addr().String())
		gwURL = func(store.Claim) string { return addr }
	}
	// Each client is its own harness: its own rollout attempt.
	var gw, direct []target
	var claims []store.Claim
	for range clients {
		cl := e.claim(b, store.ModeTrain)
		claims = append(claims, cl)
		gw = append(gw, target{gwURL(cl) + "/v1/chat/completions", cl.Key})
		direct = append(direct, target{up.URL + "/v1/chat/completions", cl.Key})
	}
	hc := benchClient()
	n := max(b.N, 2*clients)
	// Warm connections and caches.
	load(b, hc, direct, 2*clients)
	load(b, hc, gw, 2*clients)
	b.ResetTimer()
	var dl, gl []time.Duration
	var dwall, gwall, dcpu, gcpu time.Duration
	const rounds = 4
	for r := range rounds {
		m := n/rounds + min(1, max(0, n%rounds-r))
		c0 := cpuTime(b)
		l, w := load(b, hc, direct, m)
		c1 := cpuTime(b)
		dl, dwall, dcpu = append(dl, l...), dwall+w, dcpu+c1-c0
		l, w = load(b, hc, gw, m)
		gl, gwall, gcpu = append(gl, l...), gwall+w, gcpu+cpuTime(b)-c1
	}
	b.StopTimer()
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	dps, gps := float64(n)/dwall.Seconds(), float64(n)/gwall.Seconds()
	b.ReportMetric(us(pct(dl, 0.5)), "direct-p50-µs")
	b.ReportMetric(us(pct(gl, 0.5)), "gw-p50-µs")
	b.ReportMetric(us(pct(gl, 0.5)-pct(dl, 0.5)), "added-p50-µs")
	b.ReportMetric(us(pct(gl, 0.99)-pct(dl, 0.99)), "added-p99-µs")
	b.ReportMetric(dps, "direct-calls/s")
	b.ReportMetric(gps, "gw-calls/s")
	b.ReportMetric(gps/dps, "gw/direct")
	b.ReportMetric(us(dcpu)/float64(n), "direct-cpu-µs/call")
	b.ReportMetric(us(gcpu)/float64(n), "gw-cpu-µs/call")
	if gateway != "sqlite" {
		return
	}
	got := 0
	for _, cl := range claims {
		got += len(e.calls(b, cl))
	}
	if got != n+2*clients {
		b.Fatalf("%d events persisted for %d gateway calls", got, n+2*clients)
	}
}

// BenchmarkStoreAppend times one model_request-sized event append to the
// SQLite store (AppendEvents: one transaction when alone).
func BenchmarkStoreAppend(b *testing.B) {
	e := newEnv(b, proxy.Config{}, nil)
	cl := e.claim(b, store.ModeTrain)
	data := []byte(`{"call_id":"x","request":` + string(benchBody) + `,"response":` + vllmAnswer + `}`)
	ctx := testCtx(b)
	for b.Loop() {
		if _, err := e.st.AppendEvents(ctx, cl.Rollout.ID, cl.Attempt.ID, []store.NewEvent{{Type: store.EventModelRequest, Data: data}}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStoreRecord times recording the same event through the SQLite
// store's event journal (store.EventRecorder, what the gateway uses): the
// part of the gateway's added latency that persisting costs.
func BenchmarkStoreRecord(b *testing.B) {
	e := newEnv(b, proxy.Config{}, nil)
	cl := e.claim(b, store.ModeTrain)
	data := []byte(`{"call_id":"x","request":` + string(benchBody) + `,"response":` + vllmAnswer + `}`)
	ctx := testCtx(b)
	for b.Loop() {
		if err := e.st.RecordEvents(ctx, cl.Rollout.ID, cl.Attempt.ID, []store.NewEvent{{Type: store.EventModelRequest, Data: data}}); err != nil {
			b.Fatal(err)
		}
	}
}

package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/engine/upstream"
	"github.com/aglrl/agl/gateway"
	"github.com/aglrl/agl/metrics"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/postgres"
	"github.com/aglrl/agl/store/postgres/pgtest"
	"github.com/aglrl/agl/store/sqlite"
)

// The long-horizon benchmark: rollouts of lhCalls chat-completions calls,
// each adding a tool result of lhToolBytes to the history the harness
// resends (the 100th request is ~800 KB of JSON), through the real gateway
// HTTP server in front of a loopback upstream in vLLM's wire format,
// events persisted, on SQLite and PostgreSQL, with model_request events
// stored encoded (store/codec.go) and, as the baseline in the same run, as
// plain JSON (what the store wrote before schema version 3):
//
//	go test -run '^$' -bench LongHorizon -benchtime 1x ./gateway/
//	scripts/with-postgres.sh go test -run '^$' -bench LongHorizon -benchtime 1x ./gateway/
//
// Metrics: disk/conv (bytes the store grew by per rollout ÷ the final
// conversation's JSON), added-ms@100 (the 100th call's latency through the
// gateway minus the same request sent to the upstream directly, median of
// the iterations) and, with 32 rollouts at once, calls/s, MB/s written
// and p99-added-ms (a call's latency minus the upstream's own time for it).
const (
	lhCalls     = 100
	lhToolBytes = 8 << 10
)

// fakeVLLM answers chat completions in vLLM's format (top-level
// prompt_token_ids, the choice's token_ids and logprobs.content) after
// "tokenizing" the messages (a 4-byte chunk is a token), as a real server
// must read the whole prompt; it records how long it took per call.
type fakeVLLM struct {
	srv  *httptest.Server
	mu   sync.Mutex
	took map[string]time.Duration // by the last message's first line
}

func newFakeVLLM(tb testing.TB) *fakeVLLM {
	f := &fakeVLLM{took: map[string]time.Duration{}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		var req struct {
			Messages []struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
			return
		}
		ids := make([]int32, 0, 1024)
		for _, m := range req.Messages {
			ids = append(ids, 1, int32(len(m.Role)))
			for i := 0; i < len(m.Content); i += 4 {
				h := fnv.New32a()
				h.Write([]byte(m.Content[i:min(i+4, len(m.Content))]))
				ids = append(ids, int32(h.Sum32()%150000)+10)
			}
		}
		last := req.Messages[len(req.Messages)-1].Content
		key, _, _ := strings.Cut(last, "\n")
		answer := "Running the tests again after " + key + "; next I will look at the failing assertion in the parser module."
		var b bytes.Buffer
		b.WriteString(`{"id":"cmpl-up","object":"chat.completion","created":1,"model":"m","prompt_token_ids":`)
		js, _ := json.Marshal(ids)
		b.Write(js)
		b.WriteString(`,"choices":[{"index":0,"message":{"role":"assistant","content":`)
		js, _ = json.Marshal(answer)
		b.Write(js)
		b.WriteString(`},"logprobs":{"content":[`)
		var out []int32
		for i := 0; i < len(answer); i += 4 {
			if i > 0 {
				b.WriteByte(',')
			}
			tok, _ := json.Marshal(answer[i:min(i+4, len(answer))])
			fmt.Fprintf(&b, `{"token":%s,"logprob":%g}`, tok, -float64(i%9)/10)
			out = append(out, int32(1000+i))
		}
		js, _ = json.Marshal(out)
		fmt.Fprintf(&b, `]},"finish_reason":"stop","token_ids":%s}],"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, js, len(ids), len(out))
		w.Header().Set("Content-Type", "application/json")
		w.Write(b.Bytes())
		f.mu.Lock()
		f.took[key] = time.Since(start)
		f.mu.Unlock()
	}))
	tb.Cleanup(f.srv.Close)
	return f
}

// toolOutput is lhToolBytes of source-code-like text (compressible about
// as much as real tool output), its first line naming the call.
func toolOutput(rng *rand.Rand, name string) string {
	words := []string{"func", "return", "err", "if", "nil", "ctx", "store", "event", "rollout", "for", "range", ":=", "{", "}", "(", ")", "len", "data", "seq", "attempt"}
	var b strings.Builder
	b.WriteString(name + "\n")
	for b.Len() < lhToolBytes {
		fmt.Fprintf(&b, "%s_%x ", words[rng.IntN(len(words))], rng.IntN(4096))
		if rng.IntN(8) == 0 {
			b.WriteString("\n\t")
		}
	}
	return b.String()[:lhToolBytes]
}

type lhStore struct {
	st   store.Store
	m    *metrics.Metrics // observes st
	size func() int64     // bytes on disk now
	done func()           // closes; size still works after it
}

func openLHStore(b *testing.B, backend string, plain bool) lhStore {
	ctx := context.Background()
	m := metrics.New(metrics.Options{CallsFromEvents: true})
	switch backend {
	case "sqlite":
		dir := b.TempDir()
		st, err := sqlite.Open(ctx, filepath.Join(dir, "agl.db"), sqlite.Options{PlainEvents: plain, Observer: m})
		if err != nil {
			b.Fatal(err)
		}
		return lhStore{st: st, m: m, size: func() int64 { return dirSize(b, dir) }, done: func() { st.Close() }}
	default:
		if os.Getenv(pgtest.EnvURL) == "" {
			b.Skip(pgtest.EnvURL + " is unset; run under scripts/with-postgres.sh")
		}
		st, err := postgres.OpenOptions(ctx, pgtest.URL(b), postgres.Options{PlainEvents: plain, Observer: m})
		if err != nil {
			b.Fatal(err)
		}
		size := func() int64 {
			var n int64
			if err := st.Pool().QueryRow(ctx, `SELECT pg_total_relation_size('events')`).Scan(&n); err != nil {
				b.Fatal(err)
			}
			return n
		}
		return lhStore{st: st, m: m, size: size, done: func() {}}
	}
}

func dirSize(tb testing.TB, dir string) int64 {
	var n int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// lhGateway serves the gateway on loopback over st, in front of up,
// with the metrics m (which observe st) on its requests.
func lhGateway(b testing.TB, st store.Store, m *metrics.Metrics, up *fakeVLLM) string {
	cl, err := upstream.New(upstream.Config{Models: []upstream.Model{{Name: "m", Endpoints: []string{up.srv.URL + "/v1"}}}})
	if err != nil {
		b.Fatal(err)
	}
	// Wired as package app does: the metrics observe the store, and
	// measure the requests.
	px := proxy.New(proxy.Config{}, st, proxy.NewUpstreamBackend(cl))
	m.CountRollouts(st)
	srv := gateway.New(gateway.Options{Store: st, LLM: px, ReapInterval: -1, Wrap: m.Middleware})
	hs := httptest.NewServer(srv)
	b.Cleanup(hs.Close)
	return hs.URL
}

// recorded keeps the data of every event the proxy records through it.
type recorded struct {
	*sqlite.Store
	mu   sync.Mutex
	data [][]byte
}

func (r *recorded) RecordEvents(ctx context.Context, rid, aid string, evs []store.NewEvent) error {
	r.mu.Lock()
	for _, e := range evs {
		r.data = append(r.data, bytes.Clone(e.Data))
	}
	r.mu.Unlock()
	return r.Store.RecordEvents(ctx, rid, aid, evs)
}

// TestLongHorizonEventsReadBack is the golden test of the stored form
// against the gateway's own encoding: a rollout of calls through the real
// gateway; every model_request event the proxy recorded reads back byte
// for byte through the API, whole and after a cursor, also after the
// store was reopened (bases decoded from the file), while it takes a
// fraction of the space.
func TestLongHorizonEventsReadBack(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "agl.db")
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorded{Store: st}
	up := newFakeVLLM(t)
	gw := lhGateway(t, rec, metrics.New(metrics.Options{}), up)
	cl := lhClaim(ctx, t, st, "golden")
	_, final := lhRollout(ctx, t, http.DefaultClient, st, gw, up, cl, false, 30)
	check := func(c *api.Client) {
		t.Helper()
		evs, err := c.ListEvents(ctx, store.EventFilter{RolloutID: "golden", Types: []string{store.EventModelRequest}})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != len(rec.data) || len(evs) != 30 {
			t.Fatalf("%d events listed, %d recorded", len(evs), len(rec.data))
		}
		for i, e := range evs {
			if !bytes.Equal(e.Data, rec.data[i]) {
				t.Fatalf("event %d reads back different from what the gateway recorded", i)
			}
		}
		tail, err := c.ListEvents(ctx, store.EventFilter{RolloutID: "golden", AfterSeq: evs[27].Seq})
		if err != nil || len(tail) != 2 || !bytes.Equal(tail[1].Data, rec.data[29]) {
			t.Fatalf("after a cursor: %d events, %v", len(tail), err)
		}
	}
	check(api.NewClient(gw, ""))
	st.Close()
	st2, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	check(api.NewClient(lhGateway(t, st2, metrics.New(metrics.Options{}), up), ""))
	var whole int
	for _, d := range rec.data {
		whole += len(d)
	}
	size := dirSize(t, dir)
	t.Logf("%d bytes recorded, %d on disk, final conversation %d", whole, size, len(final))
	if size > int64(whole/4) {
		t.Errorf("%d bytes on disk for %d bytes of events", size, whole)
	}
}

type lhCall struct {
	gateway, direct, upstream time.Duration
}

// lhClaim creates rollout id and claims it.
func lhClaim(ctx context.Context, b testing.TB, st store.Store, id string) store.Claim {
	if _, err := st.CreateRollouts(ctx, []store.NewRollout{{ID: id, Config: store.RolloutConfig{UnresponsiveSeconds: 3600}}}); err != nil {
		b.Fatal(err)
	}
	cl, err := st.Claim(ctx, store.ClaimRequest{WorkerID: "bench"})
	if err != nil || cl.Rollout.ID != id {
		b.Fatalf("claimed %s (%v), want %s", cl.Rollout.ID, err, id)
	}
	return cl
}

// lhRollout runs one rollout's calls through the gateway at gw (and, when
// direct, each request to the upstream first); it returns each call's
// timings and the final conversation's JSON.
func lhRollout(ctx context.Context, b testing.TB, hc *http.Client, st store.Store, gw string, up *fakeVLLM, cl store.Claim, direct bool, n int) ([]lhCall, []byte) {
	id := cl.Rollout.ID
	rng := rand.New(rand.NewPCG(uint64(len(id)), 7))
	msgs := []map[string]string{{"role": "system", "content": "You are a coding agent. Use the sh tool."}, {"role": "user", "content": "Make the failing test pass."}}
	post := func(url, key string, body []byte) ([]byte, time.Duration) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		out, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("%s: %d %s %v", url, resp.StatusCode, out, err)
		}
		return out, took
	}
	calls := make([]lhCall, 0, n)
	var body []byte
	for k := 0; k < n; k++ {
		name := fmt.Sprintf("tool result %s/%d", id, k)
		msgs = append(msgs, map[string]string{"role": "user", "content": toolOutput(rng, name)})
		body, _ = json.Marshal(map[string]any{"model": "m", "messages": msgs, "max_tokens": 64,
			"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "sh", "parameters": map[string]any{"type": "object"}}}}})
		var c lhCall
		if direct {
			_, c.direct = post(up.srv.URL+"/v1/chat/completions", "", body)
		}
		out, took := post(gw+"/r/"+id+"/"+cl.Attempt.ID+"/v1/chat/completions", cl.Key, body)
		c.gateway = took
		up.mu.Lock()
		c.upstream = up.took[name]
		delete(up.took, name)
		up.mu.Unlock()
		var resp struct {
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(out, &resp); err != nil || len(resp.Choices) != 1 {
			b.Fatalf("gateway answer %.200s: %v", out, err)
		}
		msgs = append(msgs, map[string]string{"role": "assistant", "content": resp.Choices[0].Message.Content})
		calls = append(calls, c)
	}
	if _, err := st.CompleteAttempt(ctx, id, cl.Attempt.ID, store.AttemptSucceeded, ""); err != nil {
		b.Fatal(err)
	}
	return calls, body
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func BenchmarkLongHorizon(b *testing.B) {
	for _, backend := range []string{"sqlite", "postgres"} {
		for _, enc := range []string{"plain", "encoded"} {
			b.Run(backend+"/"+enc+"/one", func(b *testing.B) { benchOne(b, backend, enc == "plain") })
			b.Run(backend+"/"+enc+"/32", func(b *testing.B) { benchConcurrent(b, backend, enc == "plain", 32) })
		}
	}
}

// benchOne runs b.N rollouts one after another, each in a fresh store.
func benchOne(b *testing.B, backend string, plain bool) {
	ctx := context.Background()
	up := newFakeVLLM(b)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	var ratios, added100, added96 []float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s := openLHStore(b, backend, plain)
		gw := lhGateway(b, s.st, s.m, up)
		before := s.size()
		b.StartTimer()
		calls, final := lhRollout(ctx, b, hc, s.st, gw, up, lhClaim(ctx, b, s.st, fmt.Sprint("lh-", i)), true, lhCalls)
		b.StopTimer()
		// Everything written is on disk (the journal applied, the WAL
		// checkpointed) once the store closed.
		if _, err := s.st.ListEvents(ctx, store.EventFilter{RolloutID: fmt.Sprint("lh-", i), Limit: 1}); err != nil {
			b.Fatal(err)
		}
		s.done()
		ratios = append(ratios, float64(s.size()-before)/float64(len(final)))
		last := calls[len(calls)-1]
		added100 = append(added100, ms(last.gateway-last.direct))
		var sum time.Duration
		for _, c := range calls[len(calls)-5:] {
			sum += c.gateway - c.direct
		}
		added96 = append(added96, ms(sum/5))
		b.StartTimer()
	}
	b.ReportMetric(median(ratios), "disk/conv")
	b.ReportMetric(median(added100), "added-ms@100")
	b.ReportMetric(median(added96), "added-ms@96-100")
}

// benchConcurrent runs n rollouts at once, b.N times.
func benchConcurrent(b *testing.B, backend string, plain bool, n int) {
	ctx := context.Background()
	up := newFakeVLLM(b)
	s := openLHStore(b, backend, plain)
	gw := lhGateway(b, s.st, s.m, up)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	var added []float64
	var mu sync.Mutex
	before := s.size()
	start := time.Now()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var wg sync.WaitGroup
		for r := 0; r < n; r++ {
			cl := lhClaim(ctx, b, s.st, fmt.Sprintf("c%d-%d", i, r))
			wg.Add(1)
			go func() {
				defer wg.Done()
				calls, _ := lhRollout(ctx, b, hc, s.st, gw, up, cl, false, lhCalls)
				mu.Lock()
				for _, c := range calls {
					added = append(added, ms(c.gateway-c.upstream))
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	b.StopTimer()
	wall := time.Since(start)
	if _, err := s.st.ListEvents(ctx, store.EventFilter{RolloutID: "c0-0", Limit: 1}); err != nil {
		b.Fatal(err)
	}
	s.done()
	written := s.size() - before
	slices.Sort(added)
	b.ReportMetric(float64(len(added))/wall.Seconds(), "calls/s")
	b.ReportMetric(float64(written)/1e6/wall.Seconds(), "MB/s")
	b.ReportMetric(float64(written)/float64(n*b.N)/1e6, "MB/rollout")
	b.ReportMetric(added[len(added)*99/100], "p99-added-ms")
	b.ReportMetric(median(added), "p50-added-ms")
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

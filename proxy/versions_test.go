package proxy_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/engine/upstream"
	"github.com/aglrl/agl/gateway"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
)

// alPick is Agent Lightning's endpoint for a rollout
// (agentlightning/server/proxy.py select_server): SHA-256 of the rollout
// id, first 8 bytes big-endian, modulo the sorted endpoints.
func alPick(rollout string, eps []string) string {
	s := slices.Sorted(slices.Values(eps))
	d := sha256.Sum256([]byte(rollout))
	return s[binary.BigEndian.Uint64(d[:8])%uint64(len(s))]
}

// TestLiveModelVersions: a gateway (real gateway.Server, SQLite, token
// mode over vLLM-format upstreams on loopback) whose routing table follows
// POST /api/models without a restart: registering v2 mid-run makes the
// next calls' events name v2; endpoints added get calls, an endpoint
// removed gets no new calls; each rollout's calls stay on the endpoint
// Agent Lightning would pick; a dead endpoint is skipped with a retry
// elsewhere; a bad registration is refused.
func TestLiveModelVersions(t *testing.T) {
	ml := qwen3ChatML(t)
	srvs := map[string]*vllmServer{}
	var urls []string
	for range 3 {
		v := newVLLMServer(t, ml)
		v.loop = true
		v.push(text("ok"))
		srvs[v.url()] = v
		urls = append(urls, v.url())
	}
	slices.Sort(urls)
	a, b, c := urls[0], urls[1], urls[2]
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL + "/v1"
	dead.Close()

	const name = "Qwen/Qwen3-8B"
	cl, err := upstream.New(upstream.Config{Models: []upstream.Model{{Name: name, Endpoints: []string{a}, Version: 1}},
		Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, DeadFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{st: testutil.SQLite(t), tmpl: ml}
	e.p = proxy.New(proxy.Config{}, e.st, proxy.NewTokenBackend(upstream.NewTokenEngine(cl, "", 40960), ml, ml.Tokenizer(), 0))
	ms := proxy.NewModelSync(e.st, cl, nil)
	gw := gateway.New(gateway.Options{Store: e.st, LLM: e.p, ReapInterval: -1, ModelsChanged: ms.Changed})
	e.srv = httptest.NewServer(gw)
	t.Cleanup(e.srv.Close)

	register := func(version int64, eps ...string) {
		t.Helper()
		body := mustJSON(t, store.Model{Name: name, Version: version, Endpoints: eps})
		if st, _, out := post(t, "POST", e.srv.URL+"/api/models", nil, body); st != 200 {
			t.Fatalf("register v%d: %d %s", version, st, out)
		}
	}
	claims := make([]store.Claim, 24)
	for i := range claims {
		claims[i] = e.claim(t, store.ModeTrain)
	}
	counts := func() map[string]int {
		out := map[string]int{}
		for u, v := range srvs {
			out[u] = len(v.recorded())
		}
		return out
	}
	// call makes one chat call for claim i and returns the endpoint that
	// served it and its event.
	call := func(i int) (string, api.ModelCall) {
		t.Helper()
		before := counts()
		body := `{"model":"` + name + `","messages":[{"role":"user","content":"hi from ` + strconv.Itoa(i) + `"}]}`
		if st, _, out := post(t, "POST", base(e.srv, claims[i])+"/v1/chat/completions", bearer(claims[i].Key), body); st != 200 {
			t.Fatalf("claim %d: %d %s", i, st, out)
		}
		served := ""
		for u, n := range counts() {
			if n != before[u] {
				if served != "" || n != before[u]+1 {
					t.Fatalf("claim %d: one call reached several endpoints", i)
				}
				served = u
			}
		}
		evs := e.calls(t, claims[i])
		return served, evs[len(evs)-1]
	}
	// phase calls every claim twice and checks endpoint and version.
	phase := func(label string, eps []string, version int64) (usedBy map[string]int) {
		t.Helper()
		usedBy = map[string]int{}
		for i := range claims {
			for range 2 {
				ep, ev := call(i)
				if want := alPick(claims[i].Rollout.ID, eps); ep != want {
					t.Fatalf("%s: rollout %d served by %s, want its sticky endpoint %s", label, i, ep, want)
				}
				if ev.ModelVersion != version || ev.Model != name {
					t.Fatalf("%s: event names %s v%d, want v%d", label, ev.Model, ev.ModelVersion, version)
				}
				usedBy[ep]++
			}
		}
		return usedBy
	}

	// The configured endpoint and version, before any registration.
	phase("configured", []string{a}, 1)
	// Two endpoints added: all three serve, each rollout on one.
	register(1, a, b, c)
	if used := phase("added", urls, 1); len(used) != 3 {
		t.Fatalf("endpoints used: %v, want all three", used)
	}
	// New weights served by the same endpoints: the next calls name v2.
	register(2, a, b, c)
	phase("v2", urls, 2)
	// a removed: it gets no new call.
	nA := counts()[a]
	register(3, b, c)
	phase("removed", []string{b, c}, 3)
	if counts()[a] != nA {
		t.Fatalf("removed endpoint got %d new calls", counts()[a]-nA)
	}
	// A dead endpoint registered: its rollouts' first call is retried on
	// the next endpoint; it is then tried last by everyone.
	register(4, b, c, deadURL)
	all := []string{b, c, deadURL}
	var first, later []int
	for i := range claims {
		if alPick(claims[i].Rollout.ID, all) == deadURL {
			first = append(first, i)
		}
	}
	if len(first) < 2 {
		t.Fatalf("only %d rollouts stick to the dead endpoint", len(first))
	}
	first, later = first[:1], first[1:]
	for _, i := range first {
		ep, ev := call(i)
		if ep == "" || ev.Retries != 1 || ev.ModelVersion != 4 {
			t.Fatalf("rollout on the dead endpoint: served by %q, retries %d, v%d", ep, ev.Retries, ev.ModelVersion)
		}
	}
	for _, i := range later {
		ep, ev := call(i)
		if ep == "" || ev.Retries != 0 {
			t.Fatalf("dead endpoint not skipped: served by %q after %d retries", ep, ev.Retries)
		}
	}
	// A version without endpoints (Agent Lightning's DELETE /api/models)
	// leaves none: calls answer 503 until one is registered again.
	register(5)
	if st, _, out := post(t, "POST", base(e.srv, claims[0])+"/v1/chat/completions", bearer(claims[0].Key), `{"model":"`+name+`","messages":[{"role":"user","content":"x"}]}`); st != 503 || !strings.Contains(out, "no_endpoints") {
		t.Fatalf("no endpoints: %d %s", st, out)
	}
	register(6, b, c, deadURL)
	if ep, ev := call(later[0]); ep == "" || ev.ModelVersion != 6 {
		t.Fatalf("after re-registering: served by %q v%d", ep, ev.ModelVersion)
	}
	// A bad registration is refused, naming the field; nothing changes.
	st, _, out := post(t, "POST", e.srv.URL+"/api/models", nil, `{"name":"`+name+`","endpoints":["10.0.0.5:8000/v1"]}`)
	var apiErr struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if st != 400 || json.Unmarshal([]byte(out), &apiErr) != nil || !strings.Contains(apiErr.Error.Message, "endpoints[0]") {
		t.Fatalf("bad endpoint: %d %s", st, out)
	}
	if got := cl.Models(); len(got) != 1 || got[0].Version != 6 || !slices.Equal(got[0].Endpoints, slices.Sorted(slices.Values(all))) {
		t.Fatalf("routing table %+v", got)
	}
}

// TestModelSyncPolls: a registration written to the store by someone else
// (another gateway replica, Agent Lightning's route, a trainer) reaches
// the routing table by polling.
func TestModelSyncPolls(t *testing.T) {
	st := testutil.SQLite(t)
	cl, err := upstream.New(upstream.Config{Models: []upstream.Model{
		{Name: "m", Endpoints: []string{"http://127.0.0.1:1/v1"}, Version: 1},
		{Name: "t", Endpoints: []string{"http://127.0.0.1:5/v1"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	ms := proxy.NewModelSync(st, cl, nil)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); ms.Run(runCtx, 10*time.Millisecond) }()
	defer func() { stop(); <-done }()
	register := func(ms ...store.Model) {
		for _, m := range ms {
			if _, err := st.RegisterModel(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor := func(want []upstream.ModelInfo) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := cl.Models()
			if slices.EqualFunc(got, want, func(a, b upstream.ModelInfo) bool {
				return a.Name == b.Name && a.Version == b.Version && slices.Equal(a.Endpoints, b.Endpoints)
			}) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("routing table %+v, want %+v", got, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	register(
		store.Model{Name: "m", Version: 5, Endpoints: []string{"http://127.0.0.1:2/v1"}},
		store.Model{Name: "m", Version: 6, Endpoints: []string{"http://127.0.0.1:2/v1", "http://127.0.0.1:3/v1"}},
		store.Model{Name: "t", Version: 9, Weights: "/ckpt/9"}, // never any endpoints: the configured ones stay
		store.Model{Name: "other"}, // no endpoints: not added
		store.Model{Name: "n", Endpoints: []string{"http://127.0.0.1:4/v1"}},
	)
	waitFor([]upstream.ModelInfo{
		{Name: "m", Version: 6, Endpoints: []string{"http://127.0.0.1:2/v1", "http://127.0.0.1:3/v1"}},
		{Name: "n", Version: 1, Endpoints: []string{"http://127.0.0.1:4/v1"}},
		{Name: "t", Version: 9, Endpoints: []string{"http://127.0.0.1:5/v1"}},
	})
	// A newest version without endpoints leaves none.
	register(store.Model{Name: "n", Version: 2}, store.Model{Name: "m", Version: 7})
	waitFor([]upstream.ModelInfo{
		{Name: "m", Version: 7},
		{Name: "n", Version: 2},
		{Name: "t", Version: 9, Endpoints: []string{"http://127.0.0.1:5/v1"}},
	})
}

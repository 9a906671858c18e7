package proxy_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
)

// TestCallSeeds: with RolloutSeeds, each call that names no seed is
// seeded from its rollout's metadata seed, the attempt and its place
// among its agent's calls: the same in two rollouts with the same seed,
// different between calls and agents and for another rollout seed; a
// call's own seed is kept; an unseeded rollout, or RolloutSeeds off,
// leaves calls unseeded. The event records the seed the engine got.
func TestCallSeeds(t *testing.T) {
	calls := []struct{ agent, body string }{
		{"writer", `{"model":"m","messages":[{"role":"user","content":"a"}]}`},
		{"writer", `{"model":"m","messages":[{"role":"user","content":"b"}]}`},
		{"checker", `{"model":"m","messages":[{"role":"user","content":"a"}]}`},
		{"checker", `{"model":"m","seed":5,"messages":[{"role":"user","content":"c"}]}`},
	}
	// seeds runs the calls in a fresh attempt of a rollout with metadata md
	// and returns the seeds the events recorded.
	seeds := func(t *testing.T, e *env, md string) []uint64 {
		t.Helper()
		ctx := testCtx(t)
		if _, err := e.st.CreateRollouts(ctx, []store.NewRollout{{Task: json.RawMessage(`{}`), Mode: store.ModeTrain, Metadata: json.RawMessage(md)}}); err != nil {
			t.Fatal(err)
		}
		c, err := e.st.Claim(ctx, store.ClaimRequest{WorkerID: "test", Mode: store.ModeTrain})
		if err != nil {
			t.Fatal(err)
		}
		for _, call := range calls {
			e.eng.Push(text("ok"))
			u := e.srv.URL + "/r/" + c.Rollout.ID + "/" + c.Attempt.ID + "/agents/" + call.agent + "/v1/chat/completions"
			if code, _, body := post(t, http.MethodPost, u, bearer(c.Key), call.body); code != 200 {
				t.Fatalf("%s: %d %s", call.agent, code, body)
			}
		}
		var out []uint64
		for _, mc := range e.calls(t, c) {
			var s struct{ Seed uint64 }
			json.Unmarshal(mc.Sampling, &s)
			out = append(out, s.Seed)
		}
		return out
	}
	on := newEnv(t, proxy.Config{RolloutSeeds: true}, nil)
	a := seeds(t, on, `{"step":1,"seed":42}`)
	b := seeds(t, on, `{"step":2,"seed":42}`)
	other := seeds(t, on, `{"step":1,"seed":43}`)
	if len(a) != 4 || a[3] != 5 {
		t.Fatalf("seeds %v: want 4, the last the call's own 5", a)
	}
	for i := 0; i < 3; i++ {
		if a[i] == 0 || a[i] != b[i] || a[i] == other[i] {
			t.Errorf("call %d: seeds %d, %d (same rollout seed), %d (another): want the first two equal, the third not", i, a[i], b[i], other[i])
		}
		for j := 0; j < i; j++ {
			if a[i] == a[j] {
				t.Errorf("calls %d and %d share seed %d", j, i, a[i])
			}
		}
	}
	for _, tc := range []struct {
		name string
		cfg  proxy.Config
		md   string
	}{{"unseeded rollout", proxy.Config{RolloutSeeds: true}, `{"step":1}`}, {"RolloutSeeds off", proxy.Config{}, `{"step":1,"seed":42}`}} {
		if got := seeds(t, newEnv(t, tc.cfg, nil), tc.md); !slices.Equal(got, []uint64{0, 0, 0, 5}) {
			t.Errorf("%s: seeds %v, want [0 0 0 5]", tc.name, got)
		}
	}
}

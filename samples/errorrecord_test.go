package samples

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

// TestErrorRecordsIgnored: the records of refused and failed calls
// (api.CallError) between a rollout's calls change neither its calls nor
// its samples, exclusions and shaping: the rollout builds exactly as
// without them.
func TestErrorRecordsIgnored(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	calls := synthCalls(rng, synthOpts{turns: 4, sysLen: 8, userLen: 4, respLen: 5, toolLen: 3})
	var seq int64
	clean := toEvents(t, &seq, "r", "a", calls, nil)
	errRec := func(status int) api.ModelCall {
		return api.ModelCall{CallID: "err", API: api.ShapeChatCompletions, Status: api.CallError, HTTPStatus: status,
			Error: `{"error":{"message":"upstream down","code":"backend_error"}}`}
	}
	seq = 0
	var mixed []store.Event
	for i, c := range calls {
		batch := []api.ModelCall{c}
		if i%2 == 0 { // one before every other call, and one at the end
			batch = []api.ModelCall{errRec(502), c}
		}
		mixed = append(mixed, toEvents(t, &seq, "r", "a", batch, nil)...)
	}
	mixed = append(mixed, toEvents(t, &seq, "r", "a", []api.ModelCall{errRec(400)}, nil)...)
	// Fallback decoding (a case variant of a wanted key) must skip them too.
	mixed[0].Data = []byte(string(mixed[0].Data[:len(mixed[0].Data)-1]) + `,"Call_ID":"err"}`)
	if !json.Valid(mixed[0].Data) {
		t.Fatalf("bad test event %s", mixed[0].Data)
	}

	build := func(evs []store.Event) ([]api.ModelCall, []Sample, []Excluded) {
		cs, bad := Calls(evs, "a")
		ss, excl := Build(BuildConfig{}, "r", "g", "a", cs)
		return cs, ss, append(bad, excl...)
	}
	wantCalls, wantSamples, wantExcl := build(clean)
	gotCalls, gotSamples, gotExcl := build(mixed)
	if len(wantSamples) == 0 {
		t.Fatal("the clean rollout built no samples")
	}
	if len(gotCalls) != len(wantCalls) {
		t.Fatalf("%d calls with error records, %d without", len(gotCalls), len(wantCalls))
	}
	if !reflect.DeepEqual(gotSamples, wantSamples) || !reflect.DeepEqual(gotExcl, wantExcl) {
		t.Errorf("error records changed the build: %d samples %d excluded, want %d and %d", len(gotSamples), len(gotExcl), len(wantSamples), len(wantExcl))
	}
}

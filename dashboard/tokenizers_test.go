package dashboard_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/dashboard"
	"github.com/aglrl/agl/store"
)

// prefixDecoder decodes each id as prefix+id (a tokenizer of its own).
type prefixDecoder string

func (p prefixDecoder) Decode(ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, "%s%d", string(p), id)
	}
	return b.String()
}

// TestTokenSamplesPolicyTokenizers: a sample is decoded with the tokenizer
// of the model (policy) that served its calls; a model with none of its
// own, with the default one; without a default, its tokens stay undecoded.
func TestTokenSamplesPolicyTokenizers(t *testing.T) {
	call := func(seq int64, id, agent, model string) store.Event {
		b, _ := json.Marshal(api.ModelCall{CallID: id, Agent: agent, Model: model, ModelVersion: 1,
			PromptIDs: []int32{1, 2}, ResponseIDs: []int32{3}, ResponseLogprobs: []float32{-0.5}})
		return store.Event{Seq: seq, RolloutID: "r", AttemptID: "a", Type: store.EventModelRequest, Data: b}
	}
	evs := []store.Event{call(1, "c1", "writer", "w"), call(2, "c2", "checker", "c"), call(3, "c3", "judge", "judge-7b")}
	ro := store.Rollout{ID: "r", Mode: store.ModeTrain}
	byModel := map[string]dashboard.Decoder{"w": prefixDecoder("W"), "c": prefixDecoder("C")}
	for _, tc := range []struct {
		name string
		def  dashboard.Decoder
		want []string // each sample's first piece
	}{
		{"with a default", prefixDecoder("D"), []string{"W1", "C1", "D1"}},
		{"without", nil, []string{"W1", "C1", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ss, excl := dashboard.TokenSamples(ro, "a", evs, tc.def, byModel)
			if len(ss) != 3 || len(excl) != 0 {
				t.Fatalf("%d samples, excluded %v", len(ss), excl)
			}
			for i, s := range ss {
				got := ""
				if len(s.Pieces) > 0 {
					got = s.Pieces[0]
				}
				if got != tc.want[i] {
					t.Errorf("sample %d (call %s): first piece %q, want %q", i, s.Calls[0].CallID, got, tc.want[i])
				}
			}
		})
	}
}

package proxy

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/engine"
	"github.com/aglrl/agl/internal/fastjson"
	"github.com/aglrl/agl/store"
)

// fullCall is a model call with every field of api.ModelCall set (see
// TestFullCallSetsEveryField), and the sampling it records.
func fullCall() (api.ModelCall, engine.Sampling) {
	full := api.ModelCall{
		CallID: "chatcmpl-1", API: api.ShapeMessages, Model: `we"ird<&>` + "\n", ModelVersion: 42, Agent: "writer",
		PromptIDs: []int32{1, 2, 151643}, ResponseIDs: []int32{-1, 0, 7}, ResponseLogprobs: []float32{-0.5, -1e-9, -123.456, 0},
		NoTokenIDs: true, FinishReason: "length", Continued: true, RenderReason: "history_rewritten", UpstreamRendered: true,
		Request: json.RawMessage(`{"a":[1,2]}`), Response: json.RawMessage(` {"b":"ü"} `),
		Usage: api.Usage{PromptTokens: 3, CompletionTokens: 3}, LatencyMS: 1.2345, Retries: 2, Stream: true,
		Ignored: []string{"thinking", `tools[8] (web_search) "q"`},
		Status:  api.CallError, HTTPStatus: 502, Error: `{"error":{"message":"up\u003c"}}`,
	}
	s := engine.Sampling{Temperature: 0.7, TopP: 0.95, TopK: 20, MaxTokens: 512, StopIDs: []int32{5, 6}, Seed: math.MaxUint64}
	full.Sampling = appendSampling(nil, &s)
	return full, s
}

// TestFullCallSetsEveryField: a field added to api.ModelCall (the one
// definition of the model_request record) must be set in fullCall, so
// that TestAppendModelCall checks the hand-written encoder writes it as
// encoding/json does.
func TestFullCallSetsEveryField(t *testing.T) {
	full, _ := fullCall()
	v := reflect.ValueOf(full)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Errorf("fullCall leaves api.ModelCall.%s unset", v.Type().Field(i).Name)
		}
	}
}

// TestAppendModelCall: the hand-written event encoder produces the same
// JSON value as json.Marshal for full, empty and awkward events.
func TestAppendModelCall(t *testing.T) {
	full, s := fullCall()
	var gotS engine.Sampling
	if err := json.Unmarshal(full.Sampling, &gotS); err != nil || !reflect.DeepEqual(gotS, s) {
		t.Fatalf("sampling %s → %+v %v", full.Sampling, gotS, err)
	}
	for _, mc := range []api.ModelCall{full, {}, {CallID: "x", Continued: false, LatencyMS: 0.001}, {PromptIDs: []int32{}}} {
		var lay store.CallLayout
		got := appendModelCall(nil, &mc, nil, &lay)
		// The layout is the one the store's encoder finds: the stored
		// form is the same with and without it.
		ev := store.NewEvent{Type: store.EventModelRequest, Data: got}
		without := store.NewBases(1<<20).Batch().Encode("r", "a", ev)
		span := func(sp [2]int) string { return string(got[sp[0]:sp[1]]) }
		wantIDs := func(ids []int32) string {
			if len(ids) == 0 {
				return ""
			}
			return string(fastjson.AppendInt32s(nil, ids))
		}
		if span(lay.PromptIDs) != wantIDs(mc.PromptIDs) || span(lay.ResponseIDs) != wantIDs(mc.ResponseIDs) ||
			span(lay.Request) != strings.TrimSpace(string(mc.Request)) || lay.Agent != mc.Agent {
			t.Errorf("layout %+v of %s", lay, got)
		}
		ev.Layout = &lay
		if with := store.NewBases(1<<20).Batch().Encode("r", "a", ev); string(with.Data) != string(without.Data) {
			t.Errorf("layout %+v of %s: stored differently", lay, got)
		}
		// The prompt ids given as their JSON give the same bytes.
		text := mc
		text.PromptIDs = nil
		if js := appendModelCall(nil, &text, fastjson.AppendInt32s(nil, mc.PromptIDs), nil); mc.PromptIDs != nil && string(js) != string(got) {
			t.Errorf("prompt ids as JSON:\n%s\nwant\n%s", js, got)
		}
		want, err := json.Marshal(&mc)
		if err != nil {
			t.Fatal(err)
		}
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("invalid JSON %s: %v", got, err)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("got  %s\nwant %s", got, want)
		}
		if mc.Agent == "" && strings.Contains(string(got), `"agent"`) {
			t.Errorf("a call of the default agent names one: %s", got)
		}
	}
	// Infinite log-probs still give valid JSON.
	inf := api.ModelCall{ResponseIDs: []int32{1, 2}, ResponseLogprobs: []float32{float32(math.Inf(-1)), float32(math.NaN())}}
	if b := appendModelCall(nil, &inf, nil, nil); !json.Valid(b) {
		t.Fatalf("invalid JSON %s", b)
	}
}

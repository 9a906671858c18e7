package samples

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/aglrl/agl/api"
)

// slowCall is the reference: encoding/json restricted to the fields samples use.
func slowCall(b []byte) (api.ModelCall, error) {
	var c api.ModelCall
	if err := json.Unmarshal(b, &c); err != nil {
		return api.ModelCall{}, err
	}
	return api.ModelCall{CallID: c.CallID, API: c.API, Model: c.Model, ModelVersion: c.ModelVersion,
		PromptIDs: c.PromptIDs, ResponseIDs: c.ResponseIDs, ResponseLogprobs: c.ResponseLogprobs,
		NoTokenIDs: c.NoTokenIDs, FinishReason: c.FinishReason, Continued: c.Continued, RenderReason: c.RenderReason, Agent: c.Agent,
		Status: c.Status}, nil
}

// TestDecodeCallReadsModelCallKeys: the fast path reads every field
// samples use under the key api.ModelCall (the one definition of the
// model_request record) gives it: an event with all of them set, as
// encoding/json writes it, decodes without the fallback to the value the
// reference reads.
func TestDecodeCallReadsModelCallKeys(t *testing.T) {
	mc := api.ModelCall{CallID: "c", API: api.ShapeMessages, Model: "m", ModelVersion: 3, Agent: "writer",
		PromptIDs: []int32{1, 2}, ResponseIDs: []int32{3}, ResponseLogprobs: []float32{-0.5},
		NoTokenIDs: true, FinishReason: api.FinishLength, Continued: true, RenderReason: "first_call", Status: api.CallError}
	b, err := json.Marshal(mc)
	if err != nil {
		t.Fatal(err)
	}
	want, err := slowCall(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(want, mc) {
		t.Fatalf("the reference reads %+v, want every field set: %+v", want, mc)
	}
	var got api.ModelCall
	if !fastCall(b, &got) || !reflect.DeepEqual(got, want) {
		t.Errorf("fast path on %s:\n%+v\nwant %+v", b, got, want)
	}
}

func TestDecodeCallMatchesEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	cases := []string{
		`{}`, ` { "call_id" : "a" , "prompt_ids" : [ 1 , 2 ] } `, `{"prompt_ids":null,"response_ids":[],"response_logprobs":[-0.5,-1e-3,0]}`,
		`{"call_id":"a\"b","model_version":7}`, `{"CALL_ID":"x"}`, `{"call_id":"é"}`, `{"model_version":1.5}`, `{"prompt_ids":[1e2]}`,
		`{"prompt_ids":[2147483648]}`, `{"prompt_ids":[-2147483648,2147483647,0,-0]}`, `{"prompt_ids":[01]}`, `{"prompt_ids":[-]}`, `{"continued":true,"no_token_ids":false,"render_reason":null}`,
		`{"request":{"messages":[{"role":"user","content":"a \"}{][ b\\"}],"n":null,"t":true},"call_id":"c"}`,
		`{"call_id":"a"`, `{"call_id":"a"}x`, `[1]`, `{"call_id":"a","call_id":"b"}`, `{"response_logprobs":[-3.4028235e39]}`,
		`{"model_version":-3,"usage":{"prompt_tokens":1},"latency_ms":1.5e2}`,
		`{"call_id":"a","agent":"writer","prompt_ids":[1]}`, `{"agent":null}`, `{"agent":"a","agent":"b"}`, `{"AGENT":"x"}`,
	}
	for i := 0; i < 200; i++ {
		c := synthCalls(rng, synthOpts{turns: 1, sysLen: 5, userLen: 5, respLen: 5, toolLen: 1, version: rng.Int64N(100)})[0]
		c.Request = json.RawMessage(`{"model":"m","messages":[{"role":"user","content":"hi \"there\" \\ {[\u00e9"}],"tools":[]}`)
		c.Response = json.RawMessage(`{"choices":[{"message":{"content":null,"tool_calls":[{"id":"x"}]}}],"usage":{"total":3}}`)
		c.Sampling = json.RawMessage(`{"temperature":0.7,"top_p":1}`)
		if i%2 == 1 {
			c.Agent = "agent-" + string(rune('a'+i%26))
		}
		b, _ := json.Marshal(c)
		cases = append(cases, string(b))
	}
	for _, in := range cases {
		want, werr := slowCall([]byte(in))
		got, gerr := decodeCall([]byte(in))
		if (werr != nil) != (gerr != nil) || !reflect.DeepEqual(got, want) {
			t.Fatalf("%.200s:\nfast %+v %v\nslow %+v %v", in, got, gerr, want, werr)
		}
	}
}

func BenchmarkDecodeCall(b *testing.B) {
	rng := rand.New(rand.NewPCG(33, 34))
	c := synthCalls(rng, toolUse8)[7]
	data, _ := json.Marshal(c)
	b.SetBytes(int64(len(data)))
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodeCall(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		for b.Loop() {
			if _, err := slowCall(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

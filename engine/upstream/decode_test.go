package upstream

import (
	"encoding/json"
	"reflect"
	"testing"
)

var answerSeeds = []string{
	`{"id":"chatcmpl-up","object":"chat.completion","created":1,"model":"Qwen/Qwen3-8B","prompt_token_ids":[151644,872,198,9707],` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"Hello there.","tool_calls":[]},` +
		`"logprobs":{"content":[{"token":"Hello","logprob":-0.25,"bytes":[72],"top_logprobs":[]},{"token":" there","logprob":-0.5,"bytes":[32],"top_logprobs":[]},{"token":".","logprob":-0.125,"bytes":[46],"top_logprobs":[]},{"token":"<|im_end|>","logprob":-0.0625,"bytes":[],"top_logprobs":[]}]},` +
		`"finish_reason":"stop","stop_reason":null,"token_ids":[9707,1052,13,151645]}],` +
		`"usage":{"prompt_tokens":4,"total_tokens":8,"completion_tokens":4}}`,
	`{"model":"m","choices":[{"text":" world","finish_reason":"length","token_ids":[1,2],"prompt_token_ids":[3],"logprobs":{"token_logprobs":[-1.5,-2e-3],"tokens":["a","b"]}}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`,
	`{"model":"m","choices":[{"message":{"content":null,"reasoning_content":"think \"hard\"\n","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},"finish_reason":"tool_calls"}]}`,
	`{"model":"m","choices":[{"message":{"content":"caf\u00e9 \ud83d\ude00","reasoning":"r"},"logprobs":null,"token_ids":null}],"usage":null}`,
	`{"model":"m","choices":[]}`, `{"choices":null}`, `{"Model":"x"}`, `{"model":"a","model":"b"}`, `[]`, `{"model":1}`,
	`{"choices":[{"logprobs":{"content":[]}}]}`, `{"choices":[{"logprobs":{"content":[null,{"logprob":null}]}}]}`,
	`{"usage":{"prompt_tokens":1.5}}`, `{"prompt_token_ids":[1,99999999999]}`,
}

// FuzzDecodeAnswer: whatever decodeAnswer accepts decodes exactly as
// json.Unmarshal decodes it.
func FuzzDecodeAnswer(f *testing.F) {
	for _, s := range answerSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkAnswer(t, data) })
}

func checkAnswer(t *testing.T, data []byte) bool {
	t.Helper()
	var got wireResponse
	if !decodeAnswer(data, &got) {
		return false
	}
	var want wireResponse
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("decodeAnswer accepted %q, encoding/json: %v", data, err)
	}
	// Prompt ids compare as what promptIDs makes of them.
	norm := func(r *wireResponse) {
		ids := []*wireIDs{&r.PromptTokenIDs}
		for i := range r.Choices {
			ids = append(ids, &r.Choices[i].PromptTokenIDs)
		}
		for _, w := range ids {
			text, n, err := promptIDs(*w)
			if err != nil {
				text = []byte(err.Error())
			}
			*w = wireIDs{raw: text, n: n}
		}
	}
	norm(&got)
	norm(&want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\nfast %+v\njson %+v", data, got, want)
	}
	return true
}

// TestPromptIDs: the prompt's ids come back as encoding/json writes them,
// the upstream's bytes when they were so written, nil for none, and an
// error for what is not an array of int32.
func TestPromptIDs(t *testing.T) {
	for _, tc := range []struct {
		answer, want string
		n            int
		err          bool
	}{
		{`{"prompt_token_ids":[1,-2,3]}`, `[1,-2,3]`, 3, false},
		{`{"prompt_token_ids":[ 1, 2 ]}`, `[1,2]`, 2, false},
		{`{"prompt_token_ids":[]}`, `[]`, 0, false},
		{`{"prompt_token_ids":null}`, ``, 0, false},
		{`{}`, ``, 0, false},
		{`{"choices":[{"prompt_token_ids":[5]}]}`, ``, 0, false}, // the choice's: read by call
		{`{"prompt_token_ids":[1.5]}`, ``, 0, true},
		{`{"prompt_token_ids":"x"}`, ``, 0, true},
		{`{"prompt_token_ids":[2147483648]}`, ``, 0, true},
	} {
		for _, fast := range []bool{true, false} {
			var r wireResponse
			if !fast || !decodeAnswer([]byte(tc.answer), &r) {
				r = wireResponse{}
				if err := json.Unmarshal([]byte(tc.answer), &r); err != nil {
					t.Fatalf("%s: %v", tc.answer, err)
				}
			}
			got, n, err := promptIDs(r.PromptTokenIDs)
			if string(got) != tc.want || n != tc.n || (err != nil) != tc.err || (got == nil) != (tc.want == "") {
				t.Errorf("%s (fast %v): %q, %d, %v; want %q, %d, error %v", tc.answer, fast, got, n, err, tc.want, tc.n, tc.err)
			}
		}
	}
}

func TestDecodeAnswerSeeds(t *testing.T) {
	fast := 0
	for _, s := range answerSeeds {
		if checkAnswer(t, []byte(s)) {
			fast++
		}
	}
	if fast < 8 {
		t.Errorf("only %d of %d seeds took the fast path", fast, len(answerSeeds))
	}
}

func BenchmarkDecodeAnswer(b *testing.B) {
	data := []byte(answerSeeds[0])
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r wireResponse
			if !decodeAnswer(data, &r) {
				b.Fatal("fallback")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r wireResponse
			if err := json.Unmarshal(data, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}

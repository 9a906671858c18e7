package metrics

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/aglrl/agl/store"
)

// TestSummaryData: with its layout, a model_request event is read for
// its summary without its ids and request, to the same summary.
func TestSummaryData(t *testing.T) {
	data := []byte(`{"call_id":"c","api":"chat.completions","prompt_ids":[1,2,3],"response_ids":[4],"request":{"messages":[{"content":"x"}]},"response":{},"usage":{"prompt_tokens":3,"completion_tokens":1},"latency_ms":2.5}`)
	span := func(v string) [2]int { i := bytes.Index(data, []byte(v)); return [2]int{i, i + len(v)} }
	for _, tc := range []struct {
		name string
		lay  *store.CallLayout
		want string
	}{
		{"layout", &store.CallLayout{PromptIDs: span("[1,2,3]"), ResponseIDs: span("[4]"), Request: span(`{"messages":[{"content":"x"}]}`)},
			`{"call_id":"c","api":"chat.completions","prompt_ids":null,"response_ids":null,"request":null,"response":{},"usage":{"prompt_tokens":3,"completion_tokens":1},"latency_ms":2.5}`},
		{"request only", &store.CallLayout{Request: span(`{"messages":[{"content":"x"}]}`)},
			`{"call_id":"c","api":"chat.completions","prompt_ids":[1,2,3],"response_ids":[4],"request":null,"response":{},"usage":{"prompt_tokens":3,"completion_tokens":1},"latency_ms":2.5}`},
		{"none", nil, string(data)},
		{"out of order", &store.CallLayout{PromptIDs: span("[4]"), ResponseIDs: span("[1,2,3]")}, string(data)},
		{"out of range", &store.CallLayout{Request: [2]int{10, len(data) + 1}}, string(data)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := summaryData(store.NewEvent{Data: data, Layout: tc.lay})
			if string(got) != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
			var a, b callSummary
			if json.Unmarshal(got, &a) != nil || json.Unmarshal(data, &b) != nil || a != b {
				t.Fatalf("summary %+v, from the whole event %+v", a, b)
			}
		})
	}
}

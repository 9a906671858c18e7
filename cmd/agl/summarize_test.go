package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

// TestSummarizeCalls: `agl rollouts events` shows an answered call's tokens
// and a refused call's status and error.
func TestSummarizeCalls(t *testing.T) {
	for _, tc := range []struct {
		name string
		mc   api.ModelCall
		want string
	}{
		{"answered", api.ModelCall{API: api.ShapeChatCompletions, Model: "m", ModelVersion: 2, PromptIDs: []int32{1, 2}, ResponseIDs: []int32{3}, FinishReason: "stop", LatencyMS: 1.5},
			"chat.completions m v2: 2 prompt + 1 response tokens, stop, 1.5ms"},
		{"refused", api.ModelCall{API: api.ShapeMessages, Model: "m", Status: api.CallError, HTTPStatus: 413, Error: `{"type":"error","error":{"type":"request_too_large"}}`},
			`messages m: error, HTTP 413: {"type":"error","error":{"type":"request_too_large"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, _ := json.Marshal(tc.mc)
			if got := summarize(store.Event{Type: store.EventModelRequest, Data: data}); !strings.HasPrefix(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

package llmapi

import (
	"encoding/json"
	"reflect"
	"testing"
)

var chatSeeds = []string{
	`{"model":"gpt-4o","messages":[{"role":"user","content":"Hi"}],"temperature":1.2,"stream":true,"stream_options":{"include_usage":true}}`,
	`{"model":"m","messages":[{"role":"developer","content":[{"type":"text","text":"a"},{"type":"input_text","text":"b"}]},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"x\":\"caf\u00e9\"}"}}],"reasoning_content":"hmm"},` +
		`{"role":"tool","tool_call_id":"call_1","content":"42\n"}],"tool_choice":"auto","stop":["\n\n","END"],"seed":7,"top_p":0.9,"top_k":20,"max_completion_tokens":64,"n":1}`,
	`{"model":"m","messages":[],"response_format":{"type":"json_object"},"logprobs":false,"top_logprobs":null,"presence_penalty":0,"frequency_penalty":0.5,"modalities":["text"]}`,
	`{"model":"m","messages":null,"tools":null,"stop":null,"audio":null,"prediction":{"type":"content"},"web_search_options":{},"functions":[{"name":"f"}]}`,
	`{"Model":"x"}`, `{"model":"a","model":"b"}`, `{"logit_bias":{"1":2}}`, `{"messages":[null,{"role":1}]}`, `{"max_tokens":1.0}`,
	`{"temperature":1e50}`, `[]`, `{"model":"m"} x`, `{"messages":[{"tool_calls":[{"index":0,"function":null}]}]}`,
	`{"stream_options":null,"response_format":null,"modalities":[null,"text"]}`, `{"seed":-9223372036854775808}`,
}

// chatRoute is the route of Chat Completions calls.
const chatRoute = "/chat/completions"

// FuzzDecodeChat: whatever DecodeChatFast accepts decodes exactly as
// json.Unmarshal decodes it.
func FuzzDecodeChat(f *testing.F) {
	for _, s := range chatSeeds {
		f.Add([]byte(s))
	}
	for _, b := range fixtureBodies(f, chatRoute) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkChatDecode(t, data) })
}

func checkChatDecode(t *testing.T, data []byte) bool {
	t.Helper()
	var got ChatRequest
	if !DecodeChatFast(data, &got) {
		return false
	}
	var want ChatRequest
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("DecodeChatFast accepted %q, encoding/json: %v", data, err)
	}
	// A string content decoded on the way is the string encoding/json
	// reads from the raw content.
	for i := range got.Messages {
		m := &got.Messages[i]
		if m.isText {
			var s string
			if err := json.Unmarshal(m.Content, &s); err != nil || s != m.text {
				t.Fatalf("%q: message %d content %q decoded as %q (%v)", data, i, m.Content, m.text, err)
			}
			m.text, m.isText = "", false
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\nfast %+v\njson %+v", data, got, want)
	}
	return true
}

func TestDecodeChatSeeds(t *testing.T) {
	fast := 0
	for _, s := range chatSeeds {
		if checkChatDecode(t, []byte(s)) {
			fast++
		}
	}
	bodies := fixtureBodies(t, chatRoute)
	for _, b := range bodies {
		if !checkChatDecode(t, b) {
			t.Errorf("a captured CLI body did not take the fast path: %.200s", b)
		}
		fast++
	}
	if fast < 8 {
		t.Errorf("only %d of %d seeds took the fast path", fast, len(chatSeeds)+len(bodies))
	}
}

package proxy_test

import (
	"bytes"
	"encoding/json"
	"github.com/aglrl/agl/api"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
)

// The fuzz targets below post arbitrary bodies to one route of the proxy,
// the whole way: decode, render, the engine (which always answers "ok"),
// encode and the recorded event in a real SQLite store. Whatever the body,
// the proxy must not crash, must answer below 500 (the engine and store
// never fail here, so a 5xx is the proxy's own fault), must answer JSON
// (or an event stream for a 200 stream), and what it recorded must read
// back as valid UTF-8 JSON. Run one with, e.g.:
//
//	go test -run '^$' -fuzz '^FuzzChatCompletions$' -fuzztime 30s ./proxy/
//
// scripts/fuzz.sh runs each for a short fixed time in CI.

var (
	chatSeeds = []string{
		goodChat,
		`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}`,
		`{"model":"m","max_tokens":3,"temperature":0.5,"top_p":0.9,"seed":7,"messages":[{"role":"developer","content":[{"type":"text","text":"a"}]},{"role":"user","content":"x"}]}`,
		`{"model":"m","tools":[{"type":"function","function":{"name":"calc","parameters":{"type":"object"}}}],"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"calc","arguments":"{\"x\":1}"}}]},{"role":"tool","tool_call_id":"call_1","content":"42"}]}`,
		`{"model":"m","max_tokens":-1,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"wizard","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"user","content":5}]}`,
		`{"model":"m","n":2,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[]}`, `{"model":`, `[]`, `null`, `{"messages":[null]}`,
	}
	completionSeeds = []string{
		`{"model":"m","prompt":"hi","max_tokens":4}`,
		`{"model":"m","prompt":[1,2,3],"max_tokens":2,"stream":true}`,
		`{"model":"m","prompt":["hi"]}`, `{"model":"m","prompt":[[1,2]]}`,
		`{"model":"m","prompt":[1,99999999]}`, `{"model":"m","prompt":[-3]}`, `{"model":"m","prompt":""}`,
		`{"model":"m","prompt":"hi","echo":true}`, `{"model":"m","prompt":"hi","stop":["x"]}`, `{"prompt":null}`,
	}
	responsesSeeds = []string{
		`{"model":"m","input":"hi"}`,
		`{"model":"m","input":"hi","stream":true,"max_output_tokens":8}`,
		`{"model":"m","instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}]}`,
		`{"model":"m","tools":[{"type":"function","name":"calc","parameters":{"type":"object"}}],"input":[{"role":"user","content":"hi"},{"type":"function_call","call_id":"call_1","name":"calc","arguments":"{}"},{"type":"function_call_output","call_id":"call_1","output":"42"}]}`,
		`{"model":"m","input":"hi","previous_response_id":"resp_1"}`,
		`{"model":"m","input":[{"type":"function_call_output","call_id":"call_x","output":"r"}]}`,
		`{"model":"m","input":[{"role":"tool","content":"hi"}]}`, `{"input":5}`,
	}
	messagesSeeds = []string{
		goodMessages,
		`{"model":"m","max_tokens":10,"stream":true,"system":"be brief","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`,
		`{"model":"m","max_tokens":10,"system":[{"type":"text","text":"s"}],"tools":[{"name":"calc","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"calc","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"42"}]}]}`,
		`{"model":"m","max_tokens":10,"thinking":{"type":"enabled","budget_tokens":5},"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Sure, "}]}`,
		`{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"hi"}]}`,
		`{"model":"m","max_tokens":-1,"messages":[{"role":"user","content":"hi"}]}`,
	}
	generateContentSeeds = []string{
		`{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`,
		`{"systemInstruction":{"parts":[{"text":"be brief"}]},"generationConfig":{"temperature":0.5,"topP":0.9,"topK":4,"maxOutputTokens":8,"seed":3,"stopSequences":["x"],"thinkingConfig":{"thinkingBudget":0}},"safetySettings":[],"contents":[{"parts":[{"text":"hi"},{"text":"there"}]}]}`,
		`{"tools":[{"functionDeclarations":[{"name":"calc","parameters":{"type":"OBJECT","properties":{"x":{"type":"INTEGER"}}}}]}],"toolConfig":{"functionCallingConfig":{"mode":"ANY"}},"contents":[{"role":"user","parts":[{"text":"hi"}]},{"role":"model","parts":[{"text":"t","thought":true,"thoughtSignature":"c2ln"},{"functionCall":{"id":"c1","name":"calc","args":{"x":1}}}]},{"role":"user","parts":[{"functionResponse":{"id":"c1","name":"calc","response":{"output":"2"}}}]}]}`,
		`{"tools":[{"functionDeclarations":[{"name":"calc","parametersJsonSchema":{"type":"object"}}]}],"contents":[{"role":"user","parts":[{"text":"hi"}]},{"role":"model","parts":[{"functionCall":{"name":"calc"}}]},{"role":"function","parts":[{"functionResponse":{"name":"calc","response":{"r":[1]}}}]}]}`,
		`{"contents":[{"role":"user","parts":[{"functionResponse":{"id":"x","name":"calc","response":{}}}]}]}`,
		`{"contents":[{"role":"user","parts":[{"inlineData":{"data":""}}]}]}`,
		`{"contents":[{"role":"user","parts":[{}]}]}`, `{"contents":[]}`, `{"contents":[null]}`, `{"contents":`, `[]`, `null`,
		`{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{"candidateCount":3}}`,
	}
	eventSeeds = []string{
		`{"events":[{"type":"reward","data":{"value":1}}]}`,
		`{"events":[{"type":"log","data":"hello"},{"type":"note","data":{"k":[1,2]}}]}`,
		`{"events":[]}`, `{"events":[{"type":""}]}`, `{"events":[{"type":"reward","data":{"value":"x"}}]}`,
		`{"type":"reward","data":{"value":0.5}}`, `[]`, `{"events":null}`,
	}
)

type fuzzRoute struct {
	e     *env
	claim store.Claim
	path  string
	seq   int64 // of the last event seen
}

func newFuzzRoute(f *testing.F, route string, seeds []string) *fuzzRoute {
	e := newEnv(f, proxy.Config{MaxBodyBytes: 1 << 16, StreamKeepAlive: -1}, nil)
	cl := e.claim(f, store.ModeTrain)
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	return &fuzzRoute{e: e, claim: cl, path: "/r/" + cl.Rollout.ID + "/" + cl.Attempt.ID + "/" + route}
}

// check posts body and asserts the properties in the file comment.
func (fr *fuzzRoute) check(t *testing.T, body []byte) {
	eng := fr.e.eng
	eng.Script(text("ok"))
	req := httptest.NewRequest("POST", fr.path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+fr.claim.Key)
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	fr.e.p.ServeHTTP(w, req)
	out := w.Body.Bytes()
	if w.Code >= 500 {
		t.Fatalf("%q: status %d: %s", body, w.Code, out)
	}
	ct := w.Header().Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "text/event-stream"):
		if w.Code != 200 || !utf8.Valid(out) {
			t.Fatalf("%q: stream %d not UTF-8 or not 200: %q", body, w.Code, out)
		}
	case !json.Valid(out):
		t.Fatalf("%q: status %d, answer is not JSON (%s): %q", body, w.Code, ct, out)
	}
	evs, err := fr.e.st.ListEvents(testCtx(t), store.EventFilter{RolloutID: fr.claim.Rollout.ID, AfterSeq: fr.seq, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if !utf8.Valid(ev.Data) || !json.Valid(ev.Data) {
			t.Fatalf("%q: recorded event is not UTF-8 JSON: %q", body, ev.Data)
		}
		fr.seq = ev.Seq
	}
	switch {
	case strings.HasSuffix(fr.path, "/events"):
		if w.Code >= 400 && len(evs) != 0 {
			t.Fatalf("%q: refused with %d but recorded %d events", body, w.Code, len(evs))
		}
	case w.Code >= 400:
		// A refused model call stores its record, and nothing of the
		// request.
		var mc api.ModelCall
		if len(evs) != 1 || json.Unmarshal(evs[0].Data, &mc) != nil || mc.Status != api.CallError || mc.HTTPStatus != w.Code ||
			mc.Error != string(out) || len(mc.Request)+len(mc.PromptIDs)+len(mc.ResponseIDs) != 0 {
			t.Fatalf("%q: refused with %d; want only its error record, recorded %d events", body, w.Code, len(evs))
		}
	}
}

func FuzzChatCompletions(f *testing.F) {
	fr := newFuzzRoute(f, "v1/chat/completions", chatSeeds)
	f.Fuzz(fr.check)
}

func FuzzCompletions(f *testing.F) {
	fr := newFuzzRoute(f, "v1/completions", completionSeeds)
	f.Fuzz(fr.check)
}

func FuzzResponses(f *testing.F) {
	fr := newFuzzRoute(f, "v1/responses", responsesSeeds)
	f.Fuzz(fr.check)
}

func FuzzMessages(f *testing.F) {
	fr := newFuzzRoute(f, "v1/messages", messagesSeeds)
	f.Fuzz(fr.check)
}

func FuzzGenerateContent(f *testing.F) {
	fr := newFuzzRoute(f, "v1beta/models/m:generateContent", generateContentSeeds)
	f.Fuzz(fr.check)
}

func FuzzHarnessEvents(f *testing.F) {
	fr := newFuzzRoute(f, "events", eventSeeds)
	f.Fuzz(fr.check)
}

// TestFuzzSeedsAnswered: the seeds reach both outcomes, so the fuzz
// targets start from bodies that are served as well as refused.
func TestFuzzSeedsAnswered(t *testing.T) {
	e := newEnv(t, proxy.Config{StreamKeepAlive: -1}, nil)
	cl := e.claim(t, store.ModeTrain)
	for route, seeds := range map[string][]string{"v1/chat/completions": chatSeeds, "v1/completions": completionSeeds, "v1/responses": responsesSeeds, "v1/messages": messagesSeeds, "v1beta/models/m:generateContent": generateContentSeeds, "events": eventSeeds} {
		var ok, refused int
		for _, s := range seeds {
			e.eng.Push(text("ok"))
			st, _, _ := post(t, "POST", base(e.srv, cl)+"/"+route, bearer(cl.Key), s)
			switch {
			case st == http.StatusOK:
				ok++
			case st >= 400 && st < 500:
				refused++
			default:
				t.Errorf("%s %s: %d", route, s, st)
			}
		}
		if ok == 0 || refused == 0 {
			t.Errorf("%s: %d seeds served, %d refused; want some of each", route, ok, refused)
		}
	}
}

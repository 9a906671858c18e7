package proxy_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
)

// gmResp is the GenerateContentResponse as a client reads it.
type gmResp struct {
	Candidates []struct {
		Content struct {
			Role  string `json:"role"`
			Parts []struct {
				Text         *string `json:"text"`
				Thought      bool    `json:"thought"`
				FunctionCall *struct {
					ID   string          `json:"id"`
					Name string          `json:"name"`
					Args json.RawMessage `json:"args"`
				} `json:"functionCall"`
			} `json:"parts"`
		} `json:"content"`
		FinishReason string `json:"finishReason"`
	} `json:"candidates"`
	UsageMetadata *struct {
		PromptTokenCount     int `json:"promptTokenCount"`
		CandidatesTokenCount int `json:"candidatesTokenCount"`
		TotalTokenCount      int `json:"totalTokenCount"`
	} `json:"usageMetadata"`
	ModelVersion string `json:"modelVersion"`
	ResponseID   string `json:"responseId"`
}

// gmChunks reads an answer in the given form ("plain": one object; "sse":
// data events; "array": a JSON array) as its chunks.
func gmChunks(t *testing.T, form, body string) []gmResp {
	t.Helper()
	var out []gmResp
	switch form {
	case "plain":
		var r gmResp
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatalf("answer %q: %v", body, err)
		}
		out = append(out, r)
	case "array":
		if err := json.Unmarshal([]byte(body), &out); err != nil {
			t.Fatalf("array stream %q: %v", body, err)
		}
	case "sse":
		sc := bufio.NewScanner(strings.NewReader(body))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			d, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var r gmResp
			if err := json.Unmarshal([]byte(d), &r); err != nil {
				t.Fatalf("SSE event %q: %v", d, err)
			}
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no chunks in %q", body)
	}
	return out
}

// TestGeminiToolLoop drives a multi-turn conversation with function calls
// through generateContent, streamGenerateContent?alt=sse and the JSON-array
// streamGenerateContent, with the key as x-goog-api-key, ?key= and Bearer:
// the client sends back the model turns as it got them (thought part with a
// signature, functionCall with its id) and functionResponses naming those
// ids; every call continues the token state with exact ids.
func TestGeminiToolLoop(t *testing.T) {
	for _, tc := range []struct{ form, method, query, keyHow string }{
		{"plain", "generateContent", "", "x-goog-api-key"},
		{"sse", "streamGenerateContent", "?alt=sse", "query"},
		{"array", "streamGenerateContent", "", "bearer"},
	} {
		t.Run(tc.form, func(t *testing.T) {
			e := newEnv(t, proxy.Config{}, nil)
			cl := e.claim(t, store.ModeTrain)
			e.eng.Push(
				chat.Message{Role: chat.RoleAssistant, Reasoning: "Read a first.", ToolCalls: []chat.ToolCall{{Name: "read_file", Arguments: `{"path": "a.txt"}`}}},
				toolCall("read_file", `{"path": "b.txt"}`),
				text("Both files say hello."),
			)
			url := base(e.srv, cl) + "/v1beta/models/gemini-2.5-pro:" + tc.method + tc.query
			hdr := map[string]string{}
			switch tc.keyHow {
			case "x-goog-api-key":
				hdr["x-goog-api-key"] = cl.Key
			case "query":
				if tc.query == "" {
					url += "?key=" + cl.Key
				} else {
					url += "&key=" + cl.Key
				}
			case "bearer":
				hdr = bearer(cl.Key)
			}
			contents := []any{map[string]any{"role": "user", "parts": []any{map[string]any{"text": "What do a.txt and b.txt say?"}}}}
			req := map[string]any{
				"systemInstruction": map[string]any{"parts": []any{map[string]any{"text": "You are a coding agent."}}},
				"tools": []any{map[string]any{"functionDeclarations": []any{map[string]any{
					"name": "read_file", "description": "Read a file",
					"parameters": map[string]any{"type": "OBJECT", "properties": map[string]any{"path": map[string]any{"type": "STRING"}}, "required": []any{"path"}},
				}}}},
				"generationConfig": map[string]any{"temperature": 0.5, "topP": 0.9, "topK": 20, "maxOutputTokens": 4096, "seed": 7, "candidateCount": 1, "thinkingConfig": map[string]any{"includeThoughts": true}},
				"safetySettings":   []any{map[string]any{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}},
			}
			turn := func(k int) []gmResp {
				t.Helper()
				req["contents"] = contents
				st, h, body := post(t, "POST", url, hdr, mustJSON(t, req))
				if st != 200 {
					t.Fatalf("turn %d: %d %s", k, st, body)
				}
				ct := h.Get("Content-Type")
				if (tc.form == "sse") != strings.HasPrefix(ct, "text/event-stream") {
					t.Fatalf("turn %d: content type %q for %s", k, ct, tc.form)
				}
				return gmChunks(t, tc.form, body)
			}
			for k, path := range []string{"a.txt", "b.txt"} {
				chunks := turn(k)
				last := chunks[len(chunks)-1]
				if len(last.Candidates) != 1 || last.Candidates[0].FinishReason != "STOP" || last.UsageMetadata == nil || last.ModelVersion != "agl-test" || last.ResponseID == "" {
					t.Fatalf("turn %d: last chunk %+v", k, last)
				}
				// The model turn as the client assembles it from the chunks.
				var parts []any
				var call map[string]any
				for _, c := range chunks {
					for _, p := range c.Candidates[0].Content.Parts {
						if c.Candidates[0].Content.Role != "model" {
							t.Errorf("turn %d: role %q", k, c.Candidates[0].Content.Role)
						}
						switch {
						case p.FunctionCall != nil:
							var args struct{ Path string }
							if err := json.Unmarshal(p.FunctionCall.Args, &args); err != nil || args.Path != path || p.FunctionCall.Name != "read_file" || p.FunctionCall.ID == "" {
								t.Fatalf("turn %d: function call %+v", k, p.FunctionCall)
							}
							call = map[string]any{"id": p.FunctionCall.ID, "name": "read_file", "args": json.RawMessage(p.FunctionCall.Args)}
							// Gemini CLI's marker on a call without a signature.
							parts = append(parts, map[string]any{"functionCall": call, "thoughtSignature": "skip_thought_signature_validator"})
						case p.Thought:
							parts = append(parts, map[string]any{"text": *p.Text, "thought": true, "thoughtSignature": "c2lnbmF0dXJl"})
						case p.Text != nil && *p.Text != "":
							parts = append(parts, map[string]any{"text": *p.Text})
						}
					}
				}
				if call == nil {
					t.Fatalf("turn %d: no function call in %+v", k, chunks)
				}
				contents = append(contents,
					map[string]any{"role": "model", "parts": parts},
					map[string]any{"role": "user", "parts": []any{map[string]any{"functionResponse": map[string]any{"id": call["id"], "name": "read_file", "response": map[string]any{"output": "hello from " + path}}}}})
			}
			chunks := turn(2)
			var final string
			for _, c := range chunks {
				for _, p := range c.Candidates[0].Content.Parts {
					if p.Text != nil {
						final += *p.Text
					}
				}
			}
			if final != "Both files say hello." {
				t.Fatalf("final answer %q", final)
			}
			calls := e.calls(t, cl)
			if len(calls) != 3 {
				t.Fatalf("%d events, want 3", len(calls))
			}
			e.checkChain(t, calls, api.ShapeGenerateContent)
			for k, c := range calls {
				if want := map[bool]string{true: api.FinishToolCalls, false: api.FinishStop}[k < 2]; c.FinishReason != want {
					t.Errorf("call %d: finish_reason %q, want %q (as the response says)", k, c.FinishReason, want)
				}
				if c.Stream != (tc.form != "plain") {
					t.Errorf("call %d: stream %v for %s", k, c.Stream, tc.form)
				}
				if want := `{"temperature":0.5,"top_p":0.9,"top_k":20,"max_tokens":4096`; !strings.HasPrefix(string(c.Sampling), want) || !strings.Contains(string(c.Sampling), `"seed":7`) {
					t.Errorf("call %d: sampling %s, want %s… seed 7", k, c.Sampling, want)
				}
				if got := strings.Join(c.Ignored, ","); got != "safetySettings,generationConfig.thinkingConfig" {
					t.Errorf("call %d: ignored %q", k, c.Ignored)
				}
				var resp gmResp
				if err := json.Unmarshal(c.Response, &resp); err != nil || len(resp.Candidates) != 1 || resp.UsageMetadata.PromptTokenCount != len(c.PromptIDs) || resp.UsageMetadata.CandidatesTokenCount != len(c.ResponseIDs) {
					t.Errorf("call %d: recorded response %s (%v)", k, c.Response, err)
				}
			}
			prompt := e.tmpl.Tokenizer().Decode(calls[2].PromptIDs)
			// The OpenAPI-subset schema reached the template as JSON Schema
			// (lower-case types).
			for _, s := range []string{"You are a coding agent.", "read_file(path: string) - Read a file", "hello from a.txt", "hello from b.txt"} {
				if !strings.Contains(prompt, s) {
					t.Errorf("the last prompt lacks %q: %q", s, prompt)
				}
			}
		})
	}
}

// TestGeminiCallsWithoutIDs: the Gemini API does not require ids on
// function calls; id-less functionResponses answer the earliest
// unanswered call of their name, and the conversation continues the
// token state.
func TestGeminiCallsWithoutIDs(t *testing.T) {
	e := newEnv(t, proxy.Config{}, nil)
	cl := e.claim(t, store.ModeTrain)
	e.eng.Push(toolCall("calc", `{"x": 1}`), text("done"))
	url := base(e.srv, cl) + "/v1beta/models/m:generateContent"
	h := map[string]string{"x-goog-api-key": cl.Key}
	tools := `"tools":[{"functionDeclarations":[{"name":"calc","parametersJsonSchema":{"type":"object"}}]}]`
	st, _, body := post(t, "POST", url, h, `{`+tools+`,"contents":[{"role":"user","parts":[{"text":"go"}]}]}`)
	if st != 200 {
		t.Fatalf("%d %s", st, body)
	}
	st, _, body = post(t, "POST", url, h, `{`+tools+`,"contents":[{"role":"user","parts":[{"text":"go"}]},`+
		`{"role":"model","parts":[{"functionCall":{"name":"calc","args":{"x":1}}}]},`+
		`{"role":"user","parts":[{"functionResponse":{"name":"calc","response":{"result":2}}}]}]}`)
	if st != 200 {
		t.Fatalf("%d %s", st, body)
	}
	calls := e.calls(t, cl)
	e.checkChain(t, calls, api.ShapeGenerateContent)
	if p := e.tmpl.Tokenizer().Decode(calls[1].PromptIDs); !strings.Contains(p, `{"result":2}`) {
		t.Errorf("the function response is not in the prompt: %q", p)
	}
}

// TestGeminiAgentRoute: the Gemini routes answer under
// /agents/{agent}/ too, recorded for that agent.
func TestGeminiAgentRoute(t *testing.T) {
	e := newEnv(t, proxy.Config{}, nil)
	cl := e.claim(t, store.ModeTrain)
	e.eng.Push(text("ok"))
	st, _, body := post(t, "POST", base(e.srv, cl)+"/agents/writer/v1beta/models/m:streamGenerateContent?alt=sse", map[string]string{"x-goog-api-key": cl.Key},
		`{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`)
	if st != 200 || !strings.HasPrefix(body, "data: {") {
		t.Fatalf("%d %s", st, body)
	}
	if calls := e.calls(t, cl); len(calls) != 1 || calls[0].Agent != "writer" || calls[0].API != api.ShapeGenerateContent {
		t.Fatalf("calls %+v", calls)
	}
	st, _, body = post(t, "GET", base(e.srv, cl)+"/agents/writer/v1beta/models", map[string]string{"x-goog-api-key": cl.Key}, "")
	if st != 200 || !strings.HasPrefix(body, `{"models":[`) {
		t.Fatalf("models: %d %s", st, body)
	}
}

// TestGeminiBadInput: what the Gemini route refuses, each a 4xx in
// Google's error shape naming the field, with nothing recorded.
func TestGeminiBadInput(t *testing.T) {
	e := newEnv(t, proxy.Config{MaxBodyBytes: 1 << 16}, nil)
	cl := e.claim(t, store.ModeTrain)
	user := `{"role":"user","parts":[{"text":"hi"}]}`
	call := `{"role":"model","parts":[{"functionCall":{"id":"c1","name":"calc","args":{}}}]}`
	deep := strings.Repeat("[", 10001) + strings.Repeat("]", 10001)
	for _, tc := range []struct {
		name, body string
		status     int
		want       string // in the message
	}{
		{"malformed", `{"contents":[`, 400, "malformed JSON"},
		{"not an object", `[1]`, 400, "JSON object"},
		{"no contents", `{"contents":[]}`, 400, "contents: must not be empty"},
		{"null content", `{"contents":[null]}`, 400, "contents[0]"},
		{"empty parts", `{"contents":[{"role":"user","parts":[]}]}`, 400, "contents[0].parts: must not be empty"},
		{"bad role", `{"contents":[{"role":"assistant","parts":[{"text":"x"}]}]}`, 400, "contents[0].role"},
		{"unknown part", `{"contents":[{"role":"user","parts":[{"foo":1}]}]}`, 400, "contents[0].parts[0]: part has no data"},
		{"two data fields", `{"contents":[{"role":"user","parts":[{"text":"a","functionCall":{"name":"x"}}]}]}`, 400, "contents[0].parts[0]: part sets more than one"},
		{"inline data", `{"contents":[{"role":"user","parts":[{"inlineData":{"mimeType":"image/png","data":"AA=="}}]}]}`, 400, "contents[0].parts[0].inlineData"},
		{"mismatched response id", `{"contents":[` + user + `,` + call + `,{"role":"user","parts":[{"functionResponse":{"id":"c2","name":"calc","response":{}}}]}]}`, 400, `contents[2].parts[0].functionResponse.id: no earlier functionCall has id "c2"`},
		{"mismatched response name", `{"contents":[` + user + `,` + call + `,{"role":"user","parts":[{"functionResponse":{"id":"c1","name":"other","response":{}}}]}]}`, 400, "contents[2].parts[0].functionResponse.name"},
		{"response without call", `{"contents":[{"role":"user","parts":[{"functionResponse":{"name":"calc","response":{}}}]}]}`, 400, "no earlier unanswered functionCall"},
		{"response not object", `{"contents":[` + user + `,` + call + `,{"role":"user","parts":[{"functionResponse":{"id":"c1","name":"calc","response":"x"}}]}]}`, 400, "functionResponse.response"},
		{"duplicate call id", `{"contents":[` + user + `,{"role":"model","parts":[{"functionCall":{"id":"c1","name":"calc"}},{"functionCall":{"id":"c1","name":"calc"}}]},` + user + `]}`, 400, "contents[1].parts[1].functionCall.id"},
		{"call args not object", `{"contents":[` + user + `,{"role":"model","parts":[{"functionCall":{"name":"calc","args":[1]}}]},` + user + `]}`, 400, "functionCall.args"},
		{"call in user turn", `{"contents":[{"role":"user","parts":[{"functionCall":{"name":"calc"}}]}]}`, 400, "function calls belong to 'model' turns"},
		{"prefill", `{"contents":[` + user + `,{"role":"model","parts":[{"text":"Sure"}]}]}`, 400, "prefill"},
		{"candidateCount", `{"contents":[` + user + `],"generationConfig":{"candidateCount":2}}`, 400, "generationConfig.candidateCount"},
		{"bad type", `{"contents":[` + user + `],"generationConfig":{"temperature":"hot"}}`, 400, "temperature"},
		{"bad topK", `{"contents":[` + user + `],"generationConfig":{"topK":1.5}}`, 400, "generationConfig.topK"},
		{"negative max", `{"contents":[` + user + `],"generationConfig":{"maxOutputTokens":-1}}`, 400, "generationConfig.maxOutputTokens"},
		{"both schemas", `{"contents":[` + user + `],"tools":[{"functionDeclarations":[{"name":"f","parameters":{"type":"OBJECT"},"parametersJsonSchema":{"type":"object"}}]}]}`, 400, "tools[0].functionDeclarations[0]: set parameters or parametersJsonSchema"},
		{"nameless function", `{"contents":[` + user + `],"tools":[{"functionDeclarations":[{"description":"f"}]}]}`, 400, "tools[0].functionDeclarations[0].name"},
		{"server tool", `{"contents":[` + user + `],"tools":[{"googleSearch":{}}]}`, 400, "tools[0].googleSearch"},
		{"tool mode", `{"contents":[` + user + `],"toolConfig":{"functionCallingConfig":{"mode":"SOMETIMES"}}}`, 400, "toolConfig.functionCallingConfig.mode"},
		{"system not content", `{"systemInstruction":5,"contents":[` + user + `]}`, 400, "systemInstruction"},
		{"invalid UTF-8", "{\"contents\":[{\"role\":\"user\",\"parts\":[{\"text\":\"\xff\"}]}]}", 400, "not valid UTF-8"},
		{"deep", `{"contents":[` + user + `],"generationConfig":{"x":` + deep + `}}`, 400, "malformed JSON"},
		{"huge", `{"contents":[{"role":"user","parts":[{"text":"` + strings.Repeat("a", 1<<16) + `"}]}]}`, 413, "exceeds the limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _, body := post(t, "POST", base(e.srv, cl)+"/v1beta/models/m:generateContent", map[string]string{"x-goog-api-key": cl.Key}, tc.body)
			var eb struct {
				Error struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
					Status  string `json:"status"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(body), &eb); err != nil || st != tc.status || eb.Error.Code != st || eb.Error.Status != "INVALID_ARGUMENT" {
				t.Fatalf("%d %s (%v), want %d in Google's shape", st, body, err, tc.status)
			}
			if !strings.Contains(eb.Error.Message, tc.want) {
				t.Errorf("message %q does not say %q", eb.Error.Message, tc.want)
			}
		})
	}
	if calls := e.calls(t, cl); len(calls) != 0 {
		t.Errorf("%d calls recorded for refused requests", len(calls))
	}
}

// TestGeminiAuxRoutes: models list and get, countTokens, methods.
func TestGeminiAuxRoutes(t *testing.T) {
	e := newEnv(t, proxy.Config{}, nil)
	cl := e.claim(t, store.ModeTrain)
	b := base(e.srv, cl) + "/v1beta/models"
	h := map[string]string{"x-goog-api-key": cl.Key}
	st, _, body := post(t, "GET", b, h, "")
	var list struct {
		Models []struct {
			Name                       string   `json:"name"`
			SupportedGenerationMethods []string `json:"supportedGenerationMethods"`
		} `json:"models"`
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil || st != 200 || len(list.Models) != 1 || list.Models[0].Name != "models/agl-test" || len(list.Models[0].SupportedGenerationMethods) != 3 {
		t.Fatalf("list: %d %s", st, body)
	}
	st, _, body = post(t, "GET", b+"/gemini-2.5-pro", h, "")
	if st != 200 || !strings.HasPrefix(body, `{"name":"models/gemini-2.5-pro"`) {
		t.Fatalf("get: %d %s", st, body)
	}
	conv := chat.Conversation{Messages: []chat.Message{{Role: "system", Content: "s"}, {Role: "user", Content: "hello"}}}
	want, err := e.tmpl.Render(conv, true)
	if err != nil {
		t.Fatal(err)
	}
	wantBody := `{"totalTokens":` + strconv.Itoa(len(want)) + `}`
	for _, req := range []string{
		`{"contents":[{"role":"user","parts":[{"text":"hello"}]}],"systemInstruction":{"parts":[{"text":"s"}]}}`,
		`{"generateContentRequest":{"model":"models/x","contents":[{"role":"user","parts":[{"text":"hello"}]}],"systemInstruction":{"parts":[{"text":"s"}]}}}`,
	} {
		st, _, body = post(t, "POST", b+"/x:countTokens", h, req)
		if st != 200 || body != wantBody {
			t.Errorf("countTokens %s: %d %s, want %s", req, st, body, wantBody)
		}
	}
	for _, tc := range []struct{ method, path string }{{"GET", "/m:generateContent"}, {"POST", ""}, {"GET", "/m:countTokens"}} {
		st, h2, body := post(t, tc.method, b+tc.path, h, `{}`)
		if st != http.StatusMethodNotAllowed || !strings.Contains(body, `"status":`) {
			t.Errorf("%s %s: %d %s (Allow %q)", tc.method, tc.path, st, body, h2.Get("Allow"))
		}
	}
	if calls := e.calls(t, cl); len(calls) != 0 {
		t.Errorf("%d calls recorded by models/countTokens", len(calls))
	}
}

// TestErrorShapeByRequest: on the /r/ routes every family answers in its
// own error shape, unknown paths and refused keys included.
func TestErrorShapeByRequest(t *testing.T) {
	e := newEnv(t, proxy.Config{}, nil)
	cl := e.claim(t, store.ModeTrain)
	b := base(e.srv, cl)
	const (
		openai    = `{"error":{"message":`
		anthropic = `{"type":"error","error":{"type":`
		google    = `{"error":{"code":`
	)
	for _, tc := range []struct {
		name, method, path string
		hdr                map[string]string
		status             int
		shape              string
	}{
		{"unknown, anthropic-version", "POST", "/v1/nope", map[string]string{"anthropic-version": "2023-06-01", "x-api-key": cl.Key}, 404, anthropic},
		{"unknown, anthropic-beta", "POST", "/v1/nope", map[string]string{"anthropic-beta": "x", "x-api-key": cl.Key}, 404, anthropic},
		{"unknown, x-goog-api-key", "POST", "/v1/nope", map[string]string{"x-goog-api-key": cl.Key}, 404, google},
		{"unknown v1beta path", "POST", "/v1beta/files", bearer(cl.Key), 404, google},
		{"unknown v1beta model method", "POST", "/v1beta/models/m:embedContent", bearer(cl.Key), 404, google},
		{"unknown, agent", "POST", "/agents/w/v1beta/nope", map[string]string{"x-goog-api-key": cl.Key}, 404, google},
		{"unknown, plain", "POST", "/v1/nope", bearer(cl.Key), 404, openai},
		{"gemini wrong key", "POST", "/v1beta/models/m:generateContent", map[string]string{"x-goog-api-key": "wrong"}, 401, google},
		{"gemini conflicting keys", "POST", "/v1beta/models/m:generateContent?key=other", map[string]string{"x-goog-api-key": cl.Key}, 401, google},
		{"gemini no key", "GET", "/v1beta/models", nil, 401, google},
		{"messages no key", "POST", "/v1/messages", nil, 401, anthropic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _, body := post(t, tc.method, b+tc.path, tc.hdr, `{}`)
			if st != tc.status || !strings.HasPrefix(body, tc.shape) {
				t.Errorf("%d %s, want %d starting %s", st, body, tc.status, tc.shape)
			}
			if tc.shape == google && tc.status == 401 && !strings.Contains(body, `"status":"UNAUTHENTICATED"`) {
				t.Errorf("status name: %s", body)
			}
		})
	}
}

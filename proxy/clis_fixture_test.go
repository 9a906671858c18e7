package proxy_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
)

// fxRun is one captured CLI request sent through the gateway: what the
// checks of TestCLIRequestFields look at.
type fxRun struct {
	body    map[string]any    // the captured request body
	headers map[string]string // its headers
	mc      api.ModelCall     // its model_request event
	prompt  string            // the prompt ids the engine got, decoded
	answer  string            // the gateway's (streamed) answer
}

func (r *fxRun) ignored(t *testing.T, prefix string) {
	t.Helper()
	for _, s := range r.mc.Ignored {
		if strings.HasPrefix(s, prefix) {
			return
		}
	}
	t.Errorf("the event's ignored list has no %q: %q", prefix, r.mc.Ignored)
}

func (r *fxRun) inPrompt(t *testing.T, what, s string) {
	t.Helper()
	if !strings.Contains(r.prompt, s) {
		t.Errorf("%s %.80q is not in the rendered prompt", what, s)
	}
}

// each calls f on every element of the array at key of m.
func each(m map[string]any, key string, f func(map[string]any)) {
	arr, _ := m[key].([]any)
	for _, v := range arr {
		if o, ok := v.(map[string]any); ok {
			f(o)
		}
	}
}

// texts returns the text blocks' texts of content (a string or blocks).
func texts(content any) []string {
	if s, ok := content.(string); ok {
		return []string{s}
	}
	var out []string
	arr, _ := content.([]any)
	for _, v := range arr {
		if o, ok := v.(map[string]any); ok {
			if s, ok := o["text"].(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// recorded: nothing to check beyond the request being stored verbatim,
// which every row gets.
func recorded(*testing.T, *fxRun) {}

// toolDecl is how the Qwen3 template declares a tool to the model.
func toolDecl(name string) string { return `{"type": "function", "function": {"name": "` + name + `"` }

// inOrder checks that the markers appear in the prompt in this order.
func (r *fxRun) inOrder(t *testing.T, markers []string) {
	t.Helper()
	at := 0
	for _, m := range markers {
		i := strings.Index(r.prompt[at:], m)
		if i < 0 {
			t.Errorf("%.100q is not in the rendered prompt after offset %d (conversation order)", m, at)
			return
		}
		at += i + len(m)
	}
}

// blockPaths calls f with "messages.I.content.J" (or "system.J") and each
// content block of the body's messages (system prompt).
func blockPaths(r *fxRun, f func(path string, b map[string]any)) {
	sys, _ := r.body["system"].([]any)
	for j, v := range sys {
		if b, ok := v.(map[string]any); ok {
			f("system."+strconv.Itoa(j), b)
		}
	}
	msgs, _ := r.body["messages"].([]any)
	for i, v := range msgs {
		m, _ := v.(map[string]any)
		blocks, _ := m["content"].([]any)
		for j, bv := range blocks {
			if b, ok := bv.(map[string]any); ok {
				f("messages."+strconv.Itoa(i)+".content."+strconv.Itoa(j), b)
			}
		}
	}
}

// claudeCodeFields are the checks for every field Claude Code 2.1.328's
// requests carry (paths as fieldPaths writes them), plus a header; each
// runs on both turns.
var claudeCodeFields = map[string]func(*testing.T, *fxRun){
	"model": func(t *testing.T, r *fxRun) {
		if r.mc.Model != "agl-test" {
			t.Errorf("served model %q", r.mc.Model)
		}
	},
	"metadata": recorded,
	"stream": func(t *testing.T, r *fxRun) {
		if !r.mc.Stream || !strings.Contains(r.answer, "event: message_stop") {
			t.Errorf("not streamed (stream=%v): %.200s", r.mc.Stream, r.answer)
		}
	},
	"max_tokens": func(t *testing.T, r *fxRun) {
		var s struct {
			MaxTokens int `json:"max_tokens"`
		}
		if err := json.Unmarshal(r.mc.Sampling, &s); err != nil || s.MaxTokens <= 0 || s.MaxTokens >= 128000 {
			t.Errorf("sampling %s: want max_tokens clamped to the context's room", r.mc.Sampling)
		}
		r.ignored(t, "max_tokens (128000 clamped to ")
	},
	"thinking":           func(t *testing.T, r *fxRun) { r.ignored(t, "thinking") },
	"context_management": func(t *testing.T, r *fxRun) { r.ignored(t, "context_management") },
	"output_config":      func(t *testing.T, r *fxRun) { r.ignored(t, "output_config") },
	// Per-turn effort on a system message (per-turn-control beta).
	"messages[].output_config": func(t *testing.T, r *fxRun) {
		for i, v := range r.body["messages"].([]any) {
			if _, ok := v.(map[string]any)["output_config"]; ok {
				r.ignored(t, "messages."+strconv.Itoa(i)+".output_config")
			}
		}
	},
	"system":        recorded,
	"system[].type": recorded,
	"system[].text": func(t *testing.T, r *fxRun) {
		each(r.body, "system", func(b map[string]any) { r.inPrompt(t, "system text", b["text"].(string)) })
		first := r.body["system"].([]any)[0].(map[string]any)["text"].(string)
		if !strings.HasPrefix(r.prompt, "<|im_start|>system\n"+first) {
			t.Errorf("the prompt does not open with the system prompt: %.120q", r.prompt)
		}
	},
	"system[].cache_control":             cacheControl,
	"messages[].content[].cache_control": cacheControl,
	"messages":                           recorded,
	"messages[].content":                 recorded,
	"messages[].content[].type": func(t *testing.T, r *fxRun) {
		blockPaths(r, func(p string, b map[string]any) {
			if !slices.Contains([]string{"text", "thinking", "tool_use", "tool_result"}, b["type"].(string)) {
				t.Errorf("%s: unexpected block type %v", p, b["type"])
			}
		})
	},
	"messages[].content[].text": func(t *testing.T, r *fxRun) {
		each(r.body, "messages", func(m map[string]any) {
			for _, s := range texts(m["content"]) {
				r.inPrompt(t, "message text", s)
			}
		})
	},
	// The conversation in order: system messages inside messages stay in
	// place as system turns, between the user, assistant and tool turns.
	"messages[].role": func(t *testing.T, r *fxRun) {
		var markers []string
		sys := 0
		each(r.body, "messages", func(m map[string]any) {
			switch m["role"] {
			case "user":
				if ts := texts(m["content"]); len(ts) > 0 {
					markers = append(markers, "<|im_start|>user\n"+strings.Join(ts, "\n"))
				}
				each(m, "content", func(b map[string]any) {
					if b["type"] == "tool_result" {
						markers = append(markers, "<tool_response>\n"+strings.Join(texts(b["content"]), "\n")+"\n</tool_response>")
					}
				})
			case "system":
				sys++
				markers = append(markers, "<|im_start|>system\n"+strings.Join(texts(m["content"]), "\n")+"<|im_end|>")
			case "assistant":
				markers = append(markers, "<|im_start|>assistant\n")
			default:
				t.Errorf("unexpected role %v", m["role"])
			}
		})
		if sys == 0 {
			t.Error("the fixture has no system message inside messages")
		}
		r.inOrder(t, append(markers, "<|im_start|>assistant\n"))
		if !strings.HasSuffix(r.prompt, "<|im_start|>assistant\n") {
			t.Error("the prompt does not end with the generation prompt")
		}
	},
	"messages[].content[].thinking": func(t *testing.T, r *fxRun) {
		blockPaths(r, func(p string, b map[string]any) {
			if b["type"] == "thinking" {
				r.inPrompt(t, p+" thinking", "<think>\n"+b["thinking"].(string)+"\n</think>")
			}
		})
	},
	"messages[].content[].signature": recorded,
	"messages[].content[].id":        recorded, // tool call ids are not rendered
	"messages[].content[].name": func(t *testing.T, r *fxRun) {
		blockPaths(r, func(p string, b map[string]any) {
			if b["type"] == "tool_use" {
				r.inPrompt(t, p+" tool call", "<tool_call>\n"+`{"name": "`+b["name"].(string)+`", "arguments": `)
			}
		})
	},
	"messages[].content[].input":       recorded, // in the tool call, as generated
	"messages[].content[].tool_use_id": recorded, // checked against the tool_use ids
	"messages[].content[].content":     recorded, // the tool response (messages[].role)
	"messages[].content[].is_error": func(t *testing.T, r *fxRun) {
		blockPaths(r, func(p string, b map[string]any) {
			if b["is_error"] == true {
				r.ignored(t, p+".is_error")
			}
		})
	},
	"tools":                recorded,
	"tools[].input_schema": recorded,
	"tools[].description":  recorded,
	"tools[].name": func(t *testing.T, r *fxRun) {
		each(r.body, "tools", func(tl map[string]any) {
			if tl["defer_loading"] == true {
				return
			}
			r.inPrompt(t, "tool", toolDecl(tl["name"].(string)))
		})
	},
	"tools[].defer_loading": func(t *testing.T, r *fxRun) {
		for i, v := range r.body["tools"].([]any) {
			tl := v.(map[string]any)
			if tl["defer_loading"] != true {
				continue
			}
			if strings.Contains(r.prompt, toolDecl(tl["name"].(string))) {
				t.Errorf("deferred tool %v is in the prompt", tl["name"])
			}
			r.ignored(t, "tools."+strconv.Itoa(i)+" ("+tl["name"].(string)+", defer_loading")
		}
	},
	"header anthropic-beta": func(t *testing.T, r *fxRun) { r.ignored(t, "header anthropic-beta: claude-code-20250219,") },
}

// cacheControl: every block's cache_control is listed as ignored.
func cacheControl(t *testing.T, r *fxRun) {
	n := 0
	blockPaths(r, func(p string, b map[string]any) {
		if _, ok := b["cache_control"]; ok {
			n++
			r.ignored(t, p+".cache_control")
		}
	})
	if n == 0 {
		t.Error("no cache_control in the fixture")
	}
}

// codexFields are the checks for every field Codex 0.171.0's requests
// carry; each runs on both turns.
var codexFields = map[string]func(*testing.T, *fxRun){
	"model": func(t *testing.T, r *fxRun) {
		if r.mc.Model != "agl-test" {
			t.Errorf("served model %q", r.mc.Model)
		}
	},
	"stream": func(t *testing.T, r *fxRun) {
		if !r.mc.Stream || !strings.Contains(r.answer, "event: response.completed") {
			t.Errorf("not streamed (stream=%v): %.200s", r.mc.Stream, r.answer)
		}
	},
	"input":        recorded,
	"input[].id":   recorded,
	"input[].type": recorded,
	// The conversation in order: developer messages as system turns,
	// reasoning, calls and outputs where they were.
	"input[].role": func(t *testing.T, r *fxRun) {
		var markers []string
		each(r.body, "input", func(m map[string]any) {
			switch m["type"] {
			case "message":
				head := "<|im_start|>system\n"
				switch m["role"] {
				case "user":
					head = "<|im_start|>user\n"
				case "assistant":
					head = "<|im_start|>assistant\n"
				}
				markers = append(markers, head+strings.Join(texts(m["content"]), "\n"))
			case "reasoning":
				markers = append(markers, "<|im_start|>assistant\n<think>\n")
			case "function_call":
				markers = append(markers, "<tool_call>\n"+`{"name": "`+m["name"].(string)+`", "arguments": `+m["arguments"].(string)+"}\n</tool_call>")
			case "function_call_output":
				markers = append(markers, "<tool_response>\n"+m["output"].(string)+"\n</tool_response>")
			default:
				t.Errorf("unexpected input item type %v", m["type"])
			}
		})
		r.inOrder(t, append(markers, "<|im_start|>assistant\n"))
	},
	"input[].content":        recorded,
	"input[].content[].type": recorded,
	"input[].content[].text": func(t *testing.T, r *fxRun) {
		each(r.body, "input", func(m map[string]any) {
			for _, s := range texts(m["content"]) {
				r.inPrompt(t, "input text", s)
			}
		})
	},
	"input[].summary":        recorded,
	"input[].summary[].type": recorded,
	"input[].summary[].text": func(t *testing.T, r *fxRun) {
		each(r.body, "input", func(m map[string]any) {
			each(m, "summary", func(s map[string]any) { r.inPrompt(t, "reasoning summary", "<think>\n"+s["text"].(string)) })
		})
	},
	"input[].encrypted_content":   recorded, // null: agl sends none
	"input[].status":              recorded,
	"input[].call_id":             recorded, // matched with the outputs' call_id
	"input[].name":                recorded, // in the tool call (input[].role)
	"input[].arguments":           recorded,
	"input[].output":              recorded,
	"tools":                       recorded,
	"tools[].type":                recorded,
	"tools[].description":         recorded,
	"tools[].strict":              recorded,
	"tools[].parameters":          recorded,
	"tools[].tools[].type":        recorded,
	"tools[].tools[].description": recorded,
	"tools[].tools[].strict":      recorded,
	"tools[].tools[].parameters":  recorded,
	"tools[].name": func(t *testing.T, r *fxRun) {
		each(r.body, "tools", func(tl map[string]any) {
			if tl["type"] == "function" {
				r.inPrompt(t, "tool", toolDecl(tl["name"].(string)))
			}
		})
	},
	"tools[].tools": recorded,
	// A namespace's functions are in the prompt as namespace__function.
	"tools[].tools[].name": func(t *testing.T, r *fxRun) {
		n := 0
		each(r.body, "tools", func(tl map[string]any) {
			each(tl, "tools", func(f map[string]any) {
				n++
				r.inPrompt(t, "namespace function", toolDecl(tl["name"].(string)+"__"+f["name"].(string)))
			})
		})
		if n == 0 {
			t.Error("no namespace functions in the fixture")
		}
	},
	// web_search is a hosted tool: not in the prompt, listed as ignored.
	"tools[].external_web_access": func(t *testing.T, r *fxRun) {
		if strings.Contains(r.prompt, `"name": "web_search"`) {
			t.Error("web_search is in the prompt")
		}
		r.ignored(t, "tools[8] (web_search)")
	},
	"tool_choice":         recorded,
	"parallel_tool_calls": recorded,
	"reasoning":           func(t *testing.T, r *fxRun) { r.ignored(t, "reasoning") },
	"store":               recorded,
	"include":             func(t *testing.T, r *fxRun) { r.ignored(t, "include") },
	"prompt_cache_key":    func(t *testing.T, r *fxRun) { r.ignored(t, "prompt_cache_key") },
	"client_metadata":     recorded,
}

// geminiCLIFields are the checks for every field Gemini CLI 0.61.0's
// requests carry; each runs on both turns.
var geminiCLIFields = map[string]func(*testing.T, *fxRun){
	"contents": recorded,
	"contents[].role": func(t *testing.T, r *fxRun) {
		// The conversation in order: user text, the model's calls, the
		// function responses.
		var markers []string
		each(r.body, "contents", func(c map[string]any) {
			var txt []string
			each(c, "parts", func(p map[string]any) {
				switch {
				case p["text"] != nil:
					txt = append(txt, p["text"].(string))
				case p["functionCall"] != nil:
					fc := p["functionCall"].(map[string]any)
					markers = append(markers, "<tool_call>\n"+`{"name": "`+fc["name"].(string)+`"`)
				case p["functionResponse"] != nil:
					resp := p["functionResponse"].(map[string]any)["response"].(map[string]any)
					markers = append(markers, "<tool_response>\n"+resp["output"].(string)+"\n</tool_response>")
				}
			})
			if len(txt) > 0 {
				markers = append(markers, "<|im_start|>user\n"+strings.Join(txt, "\n"))
			}
		})
		r.inOrder(t, append(markers, "<|im_start|>assistant\n"))
	},
	"contents[].parts": recorded,
	"contents[].parts[].text": func(t *testing.T, r *fxRun) {
		each(r.body, "contents", func(c map[string]any) {
			each(c, "parts", func(p map[string]any) {
				if s, ok := p["text"].(string); ok {
					r.inPrompt(t, "text part", s)
				}
			})
		})
	},
	"contents[].parts[].functionCall":      recorded, // in the prompt (contents[].role)
	"contents[].parts[].functionCall.id":   recorded, // matched with the functionResponse's id
	"contents[].parts[].functionCall.name": recorded,
	"contents[].parts[].functionCall.args": func(t *testing.T, r *fxRun) {
		each(r.body, "contents", func(c map[string]any) {
			each(c, "parts", func(p map[string]any) {
				if fc, ok := p["functionCall"].(map[string]any); ok {
					r.inPrompt(t, "functionCall args", `"command": "`+fc["args"].(map[string]any)["command"].(string)+`"`)
				}
			})
		})
	},
	// An opaque signature: the model gets nothing from it; the request
	// keeps it verbatim.
	"contents[].parts[].thoughtSignature":          recorded,
	"contents[].parts[].functionResponse":          recorded,
	"contents[].parts[].functionResponse.id":       recorded,
	"contents[].parts[].functionResponse.name":     recorded,
	"contents[].parts[].functionResponse.response": recorded, // its output in the prompt (contents[].role)
	"systemInstruction":                            recorded,
	"systemInstruction.parts":                      recorded,
	"systemInstruction.parts[].text": func(t *testing.T, r *fxRun) {
		sys := r.body["systemInstruction"].(map[string]any)
		each(sys, "parts", func(p map[string]any) { r.inPrompt(t, "system instruction", "<|im_start|>system\n"+p["text"].(string)) })
	},
	"systemInstruction.role":       recorded,
	"tools":                        recorded,
	"tools[].functionDeclarations": recorded,
	"tools[].functionDeclarations[].description":          recorded,
	"tools[].functionDeclarations[].parametersJsonSchema": recorded,
	"tools[].functionDeclarations[].name": func(t *testing.T, r *fxRun) {
		n := 0
		each(r.body, "tools", func(tl map[string]any) {
			each(tl, "functionDeclarations", func(fd map[string]any) {
				n++
				r.inPrompt(t, "function declaration", toolDecl(fd["name"].(string)))
			})
		})
		if n == 0 {
			t.Error("no function declarations in the fixture")
		}
	},
	"generationConfig": recorded,
	"generationConfig.temperature": func(t *testing.T, r *fxRun) {
		if !strings.Contains(string(r.mc.Sampling), `"temperature":1`) {
			t.Errorf("sampling %s", r.mc.Sampling)
		}
	},
	"generationConfig.topP": func(t *testing.T, r *fxRun) {
		if !strings.Contains(string(r.mc.Sampling), `"top_p":0.95`) {
			t.Errorf("sampling %s", r.mc.Sampling)
		}
	},
	"generationConfig.topK": func(t *testing.T, r *fxRun) {
		if !strings.Contains(string(r.mc.Sampling), `"top_k":64`) {
			t.Errorf("sampling %s", r.mc.Sampling)
		}
	},
	"generationConfig.thinkingConfig": func(t *testing.T, r *fxRun) { r.ignored(t, "generationConfig.thinkingConfig") },
	"header X-Goog-Api-Key": func(t *testing.T, r *fxRun) {
		if !r.mc.Stream || !strings.HasPrefix(r.answer, "data: {") || !strings.Contains(r.answer, `"finishReason":"STOP"`) {
			t.Errorf("not an SSE stream ending with STOP (stream=%v): %.300s", r.mc.Stream, r.answer)
		}
	},
}

// fieldPaths lists the field paths of v ("tools[].name"), not descending
// into the values at opaque paths.
func fieldPaths(v any, prefix string, opaque map[string]bool, out map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			out[p] = true
			if !opaque[p] {
				fieldPaths(val, p, opaque, out)
			}
		}
	case []any:
		for _, val := range x {
			fieldPaths(val, prefix+"[]", opaque, out)
		}
	}
}

var opaqueFields = map[string]bool{
	"metadata": true, "thinking": true, "context_management": true, "output_config": true, "reasoning": true, "client_metadata": true,
	"tools[].input_schema": true, "tools[].parameters": true, "tools[].tools[].parameters": true,
	"system[].cache_control": true, "messages[].content[].cache_control": true, "messages[].output_config": true,
	"messages[].content[].input":                          true,
	"tools[].functionDeclarations[].parametersJsonSchema": true, "generationConfig.thinkingConfig": true,
	"contents[].parts[].functionCall.args": true, "contents[].parts[].functionResponse.response": true,
	"tools[].function.parameters": true, "tools[].functionDeclarations[].parameters": true,
}

// TestCLIRequestFields replays both turns of one real run of each CLI in
// cliFixtures, in each API mode (captured from the unmodified CLIs,
// testdata/*-turn{1,2}.json, headers and query included) through the gateway with the Qwen3 template
// and the same scripted replies, and checks every field they carry, in a
// table that must cover each field path of the fixtures: accepted (200,
// streamed), stored verbatim in the event, and either rendered into the
// prompt in place (mid-conversation system messages as system turns,
// namespace functions flattened, tool calls and results) or listed in the
// event's ignored field (thinking, cache_control, hosted tools, …); the
// table is the CLI's own, or its API shape's (clis_fields_test.go). Turn 2
// continues turn 1's token state.
func TestCLIRequestFields(t *testing.T) {
	for _, fx := range cliFixtures {
		t.Run(fx.cli, func(t *testing.T) {
			checks := fx.fields
			var fs [2]cliFixture
			var bodies [2]map[string]any
			paths := map[string]bool{}
			for k, file := range fx.turns {
				fs[k] = loadCLIFixture(t, file)
				if err := json.Unmarshal(fs[k].Body, &bodies[k]); err != nil {
					t.Fatal(err)
				}
				fieldPaths(bodies[k], "", opaqueFields, paths)
			}
			var missing []string
			for p := range paths {
				if checks[p] == nil {
					missing = append(missing, p)
				}
			}
			sort.Strings(missing)
			if len(missing) > 0 {
				t.Fatalf("fields of %s with no row in the table: %q", fx.cli, missing)
			}

			e := newQwenEnv(t, proxy.Config{})
			cl := e.claim(t, store.ModeTrain)
			e.eng.Push(fx.replies[:]...)
			var answers [2]string
			for k, f := range fs {
				st, _, answer := post(t, f.Method, base(e.srv, cl)+f.Path, f.headers(cl.Key), string(f.Body))
				if st != 200 {
					t.Fatalf("turn %d: status %d: %s", k+1, st, answer)
				}
				answers[k] = answer
			}
			calls := e.calls(t, cl)
			e.checkChain(t, calls, fx.shape)
			if fx.shape == api.ShapeMessages {
				// count_tokens on the first turn's body counts its prompt.
				f := fs[0]
				path := strings.Replace(f.Path, "/v1/messages", "/v1/messages/count_tokens", 1)
				st, _, body := post(t, f.Method, base(e.srv, cl)+path, f.headers(cl.Key), string(f.Body))
				if want := `{"input_tokens":` + strconv.Itoa(len(calls[0].PromptIDs)) + `}`; st != 200 || body != want {
					t.Errorf("count_tokens: %d %s, want %s", st, body, want)
				}
			}
			if fx.shape == api.ShapeGenerateContent {
				// :countTokens on the first turn's request counts its prompt.
				f := fs[0]
				path, _, _ := strings.Cut(strings.Replace(f.Path, ":streamGenerateContent", ":countTokens", 1), "?")
				st, _, body := post(t, f.Method, base(e.srv, cl)+path, f.headers(cl.Key), `{"generateContentRequest":`+string(f.Body)+`}`)
				if want := `{"totalTokens":` + strconv.Itoa(len(calls[0].PromptIDs)) + `}`; st != 200 || body != want {
					t.Errorf("countTokens: %d %s, want %s", st, body, want)
				}
			}
			names := make([]string, 0, len(checks))
			for n := range checks {
				names = append(names, n)
			}
			slices.Sort(names)
			for k, mc := range calls {
				r := &fxRun{body: bodies[k], headers: fs[k].Headers, mc: mc, prompt: e.tmpl.Tokenizer().Decode(mc.PromptIDs), answer: answers[k]}
				var got any
				if err := json.Unmarshal(r.mc.Request, &got); err != nil || !reflect.DeepEqual(got, any(r.body)) {
					t.Fatalf("turn %d: the event's request is not the body as sent (%v)", k+1, err)
				}
				t.Logf("%s turn %d prompt: %d tokens (Qwen3); ignored: %q", fx.cli, k+1, len(mc.PromptIDs), mc.Ignored)
				t.Run("turn"+strconv.Itoa(k+1), func(t *testing.T) {
					for _, n := range names {
						t.Run(n, func(t *testing.T) { checks[n](t, r) })
					}
				})
			}
		})
	}
}

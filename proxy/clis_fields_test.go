package proxy_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// The field tables of OpenCode's and Qwen Code's requests (their fixtures
// in cliFixtures), one per API shape: each covers the fields both CLIs
// send in that shape, and a row whose field a request lacks checks
// nothing on it.

// sampled checks that the event's sampling parameters hold want (a JSON
// member as the gateway writes it, "temperature":1) when the body has key.
func sampled(key, want string) func(*testing.T, *fxRun) {
	return func(t *testing.T, r *fxRun) {
		if _, ok := lookup(r.body, key); ok && !strings.Contains(string(r.mc.Sampling), want) {
			t.Errorf("sampling %s, want %s", r.mc.Sampling, want)
		}
	}
}

// ignoredIf checks the event's ignored list has prefix when the body has
// key.
func ignoredIf(key, prefix string) func(*testing.T, *fxRun) {
	return func(t *testing.T, r *fxRun) {
		if _, ok := lookup(r.body, key); ok {
			r.ignored(t, prefix)
		}
	}
}

// lookup returns the value at a dotted path of m.
func lookup(m map[string]any, path string) (any, bool) {
	var v any = m
	for _, k := range strings.Split(path, ".") {
		o, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = o[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// maxTokens: the CLI's 32000 output tokens fit beside its prompt in the
// test engine's context: the engine gets them as max_tokens.
func maxTokens(t *testing.T, r *fxRun) {
	if !strings.Contains(string(r.mc.Sampling), `"max_tokens":32000`) {
		t.Errorf("sampling %s, want max_tokens 32000", r.mc.Sampling)
	}
}

func servedModel(t *testing.T, r *fxRun) {
	if r.mc.Model != "agl-test" {
		t.Errorf("served model %q", r.mc.Model)
	}
}

// streamed checks the answer was streamed and ends with end.
func streamed(end string) func(*testing.T, *fxRun) {
	return func(t *testing.T, r *fxRun) {
		if !r.mc.Stream || !strings.Contains(r.answer, end) {
			t.Errorf("not streamed to %q (stream=%v): %.300s", end, r.mc.Stream, r.answer)
		}
	}
}

// toolCallMarker is how the Qwen3 template opens a tool call of name.
func toolCallMarker(name string) string { return "<tool_call>\n" + `{"name": "` + name + `"` }

// toolResponse is how the Qwen3 template renders a tool's output.
func toolResponse(out string) string { return "<tool_response>\n" + out + "\n</tool_response>" }

// commandArg checks that each tool call's command argument (JSON text or
// object) is in the prompt, JSON-encoded as the template writes it.
func (r *fxRun) commandArg(t *testing.T, args any) {
	t.Helper()
	m, ok := args.(map[string]any)
	if s, isStr := args.(string); isStr {
		ok = json.Unmarshal([]byte(s), &m) == nil
	}
	cmd, _ := m["command"].(string)
	if !ok || cmd == "" {
		t.Errorf("tool call arguments %v have no command", args)
		return
	}
	b, _ := json.Marshal(cmd)
	r.inPrompt(t, "tool call command", `"command": `+string(b))
}

// chatFields: OpenAI Chat Completions (OpenCode's openai-compatible
// provider, Qwen Code --auth-type openai).
var chatFields = map[string]func(*testing.T, *fxRun){
	"model":      servedModel,
	"max_tokens": maxTokens,
	"stream":     streamed("data: [DONE]"),
	// The usage chunk before [DONE].
	"stream_options":               recorded,
	"stream_options.include_usage": streamed(`"usage":{"prompt_tokens":`),
	"messages":                     recorded,
	"messages[].content":           recorded,
	"messages[].content[].type":    recorded,
	"messages[].content[].text": func(t *testing.T, r *fxRun) {
		each(r.body, "messages", func(m map[string]any) {
			for _, s := range texts(m["content"]) {
				r.inPrompt(t, "message text", s)
			}
		})
	},
	// The conversation in order: the system prompt, the user's text, the
	// assistant's reasoning and tool call, the tool's output.
	"messages[].role": func(t *testing.T, r *fxRun) {
		var markers []string
		each(r.body, "messages", func(m map[string]any) {
			txt := strings.Join(texts(m["content"]), "\n")
			switch m["role"] {
			case "system":
				markers = append(markers, "<|im_start|>system\n"+txt)
			case "user":
				markers = append(markers, "<|im_start|>user\n"+txt)
			case "assistant":
				markers = append(markers, "<|im_start|>assistant\n")
				if rc, _ := m["reasoning_content"].(string); rc != "" {
					markers = append(markers, "<think>\n"+rc+"\n</think>")
				}
				each(m, "tool_calls", func(tc map[string]any) {
					markers = append(markers, toolCallMarker(tc["function"].(map[string]any)["name"].(string)))
				})
			case "tool":
				markers = append(markers, toolResponse(txt))
			default:
				t.Errorf("unexpected role %v", m["role"])
			}
		})
		r.inOrder(t, append(markers, "<|im_start|>assistant\n"))
		if !strings.HasSuffix(r.prompt, "<|im_start|>assistant\n") {
			t.Error("the prompt does not end with the generation prompt")
		}
	},
	"messages[].reasoning_content": recorded, // in place (messages[].role)
	"messages[].tool_calls":        recorded,
	"messages[].tool_calls[].id":   recorded, // matched with the tool message's tool_call_id
	"messages[].tool_calls[].type": recorded,
	"messages[].tool_calls[].function": func(t *testing.T, r *fxRun) {
		each(r.body, "messages", func(m map[string]any) {
			each(m, "tool_calls", func(tc map[string]any) { r.commandArg(t, tc["function"].(map[string]any)["arguments"]) })
		})
	},
	"messages[].tool_calls[].function.name":      recorded, // in place (messages[].role)
	"messages[].tool_calls[].function.arguments": recorded, // in place (messages[].tool_calls[].function)
	"messages[].tool_call_id":                    recorded,
	"tools":                                      recorded,
	"tools[].type":                               recorded,
	"tools[].function":                           recorded,
	"tools[].function.description":               recorded,
	"tools[].function.parameters":                recorded,
	"tools[].function.name": func(t *testing.T, r *fxRun) {
		each(r.body, "tools", func(tl map[string]any) {
			r.inPrompt(t, "tool", toolDecl(tl["function"].(map[string]any)["name"].(string)))
		})
	},
	"tool_choice": recorded, // "auto", what the gateway does
}

// responsesFields: the OpenAI Responses API (OpenCode's openai provider,
// Qwen Code --auth-type openai-responses).
var responsesFields = map[string]func(*testing.T, *fxRun){
	"model":             servedModel,
	"max_output_tokens": maxTokens,
	"stream":            streamed("event: response.completed"),
	"instructions": func(t *testing.T, r *fxRun) {
		if s, ok := r.body["instructions"].(string); ok && !strings.HasPrefix(r.prompt, "<|im_start|>system\n"+s) {
			t.Errorf("the prompt does not open with the instructions: %.120q", r.prompt)
		}
	},
	"input":                  recorded,
	"input[].type":           recorded,
	"input[].content":        recorded,
	"input[].content[].type": recorded,
	"input[].content[].text": func(t *testing.T, r *fxRun) {
		each(r.body, "input", func(m map[string]any) {
			for _, s := range texts(m["content"]) {
				r.inPrompt(t, "input text", s)
			}
		})
	},
	// The conversation in order: developer messages as system turns, user
	// text, calls and outputs.
	"input[].role": func(t *testing.T, r *fxRun) {
		var markers []string
		each(r.body, "input", func(m map[string]any) {
			switch {
			case m["role"] != nil:
				head := "<|im_start|>system\n"
				switch m["role"] {
				case "user":
					head = "<|im_start|>user\n"
				case "assistant":
					head = "<|im_start|>assistant\n"
				}
				markers = append(markers, head+strings.Join(texts(m["content"]), "\n"))
			case m["type"] == "function_call":
				markers = append(markers, toolCallMarker(m["name"].(string)))
			case m["type"] == "function_call_output":
				markers = append(markers, toolResponse(m["output"].(string)))
			default:
				t.Errorf("unexpected input item %v", m["type"])
			}
		})
		r.inOrder(t, append(markers, "<|im_start|>assistant\n"))
	},
	"input[].call_id": recorded, // matched with the output's call_id
	"input[].name":    recorded, // in place (input[].role)
	"input[].arguments": func(t *testing.T, r *fxRun) {
		each(r.body, "input", func(m map[string]any) {
			if m["type"] == "function_call" {
				r.commandArg(t, m["arguments"])
			}
		})
	},
	"input[].output":      recorded, // in place (input[].role)
	"tools":               recorded,
	"tools[].type":        recorded,
	"tools[].description": recorded,
	"tools[].parameters":  recorded,
	"tools[].strict":      recorded,
	"tools[].name": func(t *testing.T, r *fxRun) {
		each(r.body, "tools", func(tl map[string]any) { r.inPrompt(t, "tool", toolDecl(tl["name"].(string))) })
	},
	"tool_choice":         recorded, // "auto"
	"parallel_tool_calls": recorded,
	"store":               recorded, // false: nothing to keep
	"include":             ignoredIf("include", "include"),
	"prompt_cache_key":    ignoredIf("prompt_cache_key", "prompt_cache_key"),
}

// messagesFields: Anthropic Messages (OpenCode's anthropic provider, Qwen
// Code --auth-type anthropic).
var messagesFields = map[string]func(*testing.T, *fxRun){
	"model":       servedModel,
	"max_tokens":  maxTokens,
	"stream":      streamed("event: message_stop"),
	"temperature": sampled("temperature", `"temperature":1`),
	"thinking":    ignoredIf("thinking", "thinking"),
	"tool_choice": recorded, // {"type": "auto"}
	"tool_choice.type": func(t *testing.T, r *fxRun) {
		if tc, ok := lookup(r.body, "tool_choice.type"); ok && tc != "auto" {
			t.Errorf("tool_choice %v: the table expects auto", tc)
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
	"tools[].cache_control": func(t *testing.T, r *fxRun) {
		for i, v := range r.body["tools"].([]any) {
			if _, ok := v.(map[string]any)["cache_control"]; ok {
				r.ignored(t, "tools."+strconv.Itoa(i)+".cache_control")
			}
		}
	},
	"tools[].cache_control.type": recorded, // with its cache_control
	"messages":                   recorded,
	"messages[].content":         recorded,
	"messages[].content[].type":  recorded,
	"messages[].content[].text": func(t *testing.T, r *fxRun) {
		each(r.body, "messages", func(m map[string]any) {
			for _, s := range texts(m["content"]) {
				r.inPrompt(t, "message text", s)
			}
		})
	},
	// The conversation in order: the user's text blocks, the assistant's
	// thinking and tool call, the tool result.
	"messages[].role": func(t *testing.T, r *fxRun) {
		var markers []string
		each(r.body, "messages", func(m map[string]any) {
			switch m["role"] {
			case "user":
				if ts := texts(m["content"]); len(ts) > 0 {
					markers = append(markers, "<|im_start|>user\n"+strings.Join(ts, "\n"))
				}
				each(m, "content", func(b map[string]any) {
					if b["type"] == "tool_result" {
						markers = append(markers, toolResponse(strings.Join(texts(b["content"]), "\n")))
					}
				})
			case "assistant":
				markers = append(markers, "<|im_start|>assistant\n")
				each(m, "content", func(b map[string]any) {
					switch b["type"] {
					case "thinking":
						markers = append(markers, "<think>\n"+b["thinking"].(string)+"\n</think>")
					case "tool_use":
						markers = append(markers, toolCallMarker(b["name"].(string)))
					}
				})
			default:
				t.Errorf("unexpected role %v", m["role"])
			}
		})
		r.inOrder(t, append(markers, "<|im_start|>assistant\n"))
		if !strings.HasSuffix(r.prompt, "<|im_start|>assistant\n") {
			t.Error("the prompt does not end with the generation prompt")
		}
	},
	"messages[].content[].thinking":  recorded, // in place (messages[].role)
	"messages[].content[].signature": recorded, // empty: agl sends none
	"messages[].content[].id":        recorded, // matched with the tool_result's tool_use_id
	"messages[].content[].name":      recorded, // in place (messages[].role)
	"messages[].content[].input": func(t *testing.T, r *fxRun) {
		blockPaths(r, func(_ string, b map[string]any) {
			if b["type"] == "tool_use" {
				r.commandArg(t, b["input"])
			}
		})
	},
	"messages[].content[].tool_use_id": recorded,
	"messages[].content[].content":     recorded, // in place (messages[].role)
	"tools":                            recorded,
	"tools[].description":              recorded,
	"tools[].input_schema":             recorded,
	"tools[].name": func(t *testing.T, r *fxRun) {
		each(r.body, "tools", func(tl map[string]any) { r.inPrompt(t, "tool", toolDecl(tl["name"].(string))) })
	},
	"header anthropic-beta": func(t *testing.T, r *fxRun) {
		if r.headers["Anthropic-Beta"] != "" {
			r.ignored(t, "header anthropic-beta: "+r.headers["Anthropic-Beta"])
		}
	},
}

// generateContentFields: the Gemini API (OpenCode's google provider, Qwen
// Code --auth-type gemini).
var generateContentFields = map[string]func(*testing.T, *fxRun){
	"contents": recorded,
	// The conversation in order: user text, the model's thought and call,
	// the function response (its output string, or the response object as
	// JSON).
	"contents[].role": func(t *testing.T, r *fxRun) {
		var markers []string
		each(r.body, "contents", func(c map[string]any) {
			var txt []string
			each(c, "parts", func(p map[string]any) {
				switch {
				case p["thought"] == true:
					markers = append(markers, "<think>\n"+p["text"].(string)+"\n</think>")
				case p["text"] != nil:
					txt = append(txt, p["text"].(string))
				case p["functionCall"] != nil:
					markers = append(markers, toolCallMarker(p["functionCall"].(map[string]any)["name"].(string)))
				case p["functionResponse"] != nil:
					resp := p["functionResponse"].(map[string]any)["response"].(map[string]any)
					if out, ok := resp["output"].(string); ok {
						markers = append(markers, toolResponse(out))
					} else {
						b, _ := json.Marshal(resp["content"])
						markers = append(markers, "<tool_response>\n{", `"content":`+string(b))
					}
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
	"contents[].parts[].thought":           recorded, // in place (contents[].role)
	"contents[].parts[].functionCall":      recorded,
	"contents[].parts[].functionCall.id":   recorded, // matched with the functionResponse's id
	"contents[].parts[].functionCall.name": recorded, // in place (contents[].role)
	"contents[].parts[].functionCall.args": func(t *testing.T, r *fxRun) {
		each(r.body, "contents", func(c map[string]any) {
			each(c, "parts", func(p map[string]any) {
				if fc, ok := p["functionCall"].(map[string]any); ok {
					r.commandArg(t, fc["args"])
				}
			})
		})
	},
	"contents[].parts[].functionResponse":          recorded,
	"contents[].parts[].functionResponse.id":       recorded,
	"contents[].parts[].functionResponse.name":     recorded,
	"contents[].parts[].functionResponse.response": recorded, // in place (contents[].role)
	"systemInstruction":                            recorded,
	"systemInstruction.role":                       recorded,
	"systemInstruction.parts":                      recorded,
	"systemInstruction.parts[].text": func(t *testing.T, r *fxRun) {
		sys := r.body["systemInstruction"].(map[string]any)
		each(sys, "parts", func(p map[string]any) { r.inPrompt(t, "system instruction", p["text"].(string)) })
		if !strings.HasPrefix(r.prompt, "<|im_start|>system\n") {
			t.Errorf("the prompt does not open with the system instruction: %.120q", r.prompt)
		}
	},
	"tools":                        recorded,
	"tools[].functionDeclarations": recorded,
	"tools[].functionDeclarations[].description":          recorded,
	"tools[].functionDeclarations[].parameters":           recorded,
	"tools[].functionDeclarations[].parametersJsonSchema": recorded,
	"tools[].functionDeclarations[].name": func(t *testing.T, r *fxRun) {
		each(r.body, "tools", func(tl map[string]any) {
			each(tl, "functionDeclarations", func(fd map[string]any) { r.inPrompt(t, "function declaration", toolDecl(fd["name"].(string))) })
		})
	},
	"toolConfig":                            recorded,
	"toolConfig.functionCallingConfig":      recorded,
	"toolConfig.functionCallingConfig.mode": recorded, // AUTO, what the gateway does
	"generationConfig":                      recorded,
	"generationConfig.maxOutputTokens":      maxTokens,
	"generationConfig.temperature":          sampled("generationConfig.temperature", `"temperature":1`),
	"generationConfig.topP":                 sampled("generationConfig.topP", `"top_p":0.95`),
	"generationConfig.topK":                 sampled("generationConfig.topK", `"top_k":64`),
	"generationConfig.thinkingConfig":       ignoredIf("generationConfig.thinkingConfig", "generationConfig.thinkingConfig"),
	"header X-Goog-Api-Key":                 streamed(`"finishReason":"STOP"`),
}

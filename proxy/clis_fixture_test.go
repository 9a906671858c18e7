package proxy_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
)

// fxRun is one captured CLI request sent through the gateway: what the
// checks of TestCLIRequestFields look at.
type fxRun struct {
	body   map[string]any // the captured request body
	mc     api.ModelCall  // its model_request event
	prompt string         // the prompt ids the engine got, decoded
	answer string         // the gateway's (streamed) answer
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

// claudeCodeFields are the checks for every field Claude Code 2.1.328's
// first request carries (paths as fieldPaths writes them), plus headers.
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
	"messages[].output_config": func(t *testing.T, r *fxRun) { r.ignored(t, "messages.1.output_config") },
	"system":                   recorded,
	"system[].type":            recorded,
	"system[].text": func(t *testing.T, r *fxRun) {
		each(r.body, "system", func(b map[string]any) { r.inPrompt(t, "system text", b["text"].(string)) })
		first := r.body["system"].([]any)[0].(map[string]any)["text"].(string)
		if !strings.HasPrefix(r.prompt, "<|im_start|>system\n"+first) {
			t.Errorf("the prompt does not open with the system prompt: %.120q", r.prompt)
		}
	},
	"system[].cache_control": func(t *testing.T, r *fxRun) { r.ignored(t, "system.1.cache_control") },
	"messages":               recorded,
	"messages[].content":     recorded,
	"messages[].content[].type": func(t *testing.T, r *fxRun) {
		each(r.body, "messages", func(m map[string]any) {
			each(m, "content", func(b map[string]any) {
				if b["type"] != "text" {
					t.Errorf("unexpected block type %v", b["type"])
				}
			})
		})
	},
	"messages[].content[].text": func(t *testing.T, r *fxRun) {
		each(r.body, "messages", func(m map[string]any) {
			for _, s := range texts(m["content"]) {
				r.inPrompt(t, "message text", s)
			}
		})
	},
	"messages[].content[].cache_control": func(t *testing.T, r *fxRun) { r.ignored(t, "messages.1.content.0.cache_control") },
	// The mid-conversation system message stays in place: a system turn
	// after the user turn, before the generation prompt.
	"messages[].role": func(t *testing.T, r *fxRun) {
		msgs := r.body["messages"].([]any)
		var user, sys string
		for _, v := range msgs {
			m := v.(map[string]any)
			switch m["role"] {
			case "user":
				user = strings.Join(texts(m["content"]), "\n")
			case "system":
				sys = strings.Join(texts(m["content"]), "\n")
			default:
				t.Errorf("unexpected role %v", m["role"])
			}
		}
		if sys == "" {
			t.Fatal("the fixture has no system message inside messages")
		}
		want := "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>system\n" + sys + "<|im_end|>\n<|im_start|>assistant\n"
		if !strings.HasSuffix(r.prompt, want) {
			t.Errorf("the prompt does not end with the user turn, the system turn, the generation prompt: %.300q", r.prompt[max(0, len(r.prompt)-300):])
		}
		var req struct {
			Messages []struct {
				Role string `json:"role"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(r.mc.Request, &req); err != nil || len(req.Messages) != len(msgs) || req.Messages[1].Role != "system" {
			t.Errorf("the event's request lost the system message: %v", err)
		}
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
		each(r.body, "tools", func(tl map[string]any) {
			if tl["defer_loading"] == true && strings.Contains(r.prompt, toolDecl(tl["name"].(string))) {
				t.Errorf("deferred tool %v is in the prompt", tl["name"])
			}
		})
		r.ignored(t, "tools.10 (DeferredToolPlaceholder, defer_loading")
	},
	"header anthropic-beta": func(t *testing.T, r *fxRun) { r.ignored(t, "header anthropic-beta: claude-code-20250219,") },
}

// codexFields are the checks for every field Codex 0.171.0's first request
// carries.
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
	// developer messages are system turns, in place.
	"input[].role": func(t *testing.T, r *fxRun) {
		var prev int
		each(r.body, "input", func(m map[string]any) {
			head := "<|im_start|>system\n"
			if m["role"] == "user" {
				head = "<|im_start|>user\n"
			}
			s := strings.Join(texts(m["content"]), "\n")
			i := strings.Index(r.prompt, head+s)
			if m["role"] == "developer" && prev == 0 && i < 0 {
				// The first system turn also holds the tool declarations.
				i = strings.Index(r.prompt, s)
			}
			if i < prev {
				t.Errorf("%v message %.60q is not a %s turn after the previous one", m["role"], s, strings.TrimSpace(head))
			}
			prev = i
		})
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
}

// TestCLIRequestFields sends the first request Claude Code and Codex send
// (captured from the real CLIs, testdata/*-first.json, headers and query
// included) through the gateway with the Qwen3 template, and checks every
// field they carry, in a table that must cover each field path of the
// fixture: accepted (200, streamed), stored verbatim in the event, and
// either rendered into the prompt (mid-conversation system messages as
// system turns in place, namespace functions flattened) or listed in the
// event's ignored field (thinking, cache_control, hosted tools, …).
func TestCLIRequestFields(t *testing.T) {
	for _, fx := range cliFixtures {
		t.Run(fx.cli, func(t *testing.T) {
			f := loadCLIFixture(t, fx.file)
			checks := claudeCodeFields
			if fx.cli == "codex" {
				checks = codexFields
			}
			var body map[string]any
			if err := json.Unmarshal(f.Body, &body); err != nil {
				t.Fatal(err)
			}
			paths := map[string]bool{}
			fieldPaths(body, "", opaqueFields, paths)
			var missing []string
			for p := range paths {
				if checks[p] == nil {
					missing = append(missing, p)
				}
			}
			sort.Strings(missing)
			if len(missing) > 0 {
				t.Fatalf("fields of %s with no row in the table: %q", fx.file, missing)
			}

			e := newQwenEnv(t, proxy.Config{})
			cl := e.claim(t, store.ModeTrain)
			e.eng.push(text("Hello."))
			st, _, answer := post(t, f.Method, base(e.srv, cl)+f.Path, f.headers(cl.Key), string(f.Body))
			if st != 200 {
				t.Fatalf("status %d: %s", st, answer)
			}
			calls := e.calls(t, cl)
			if len(calls) != 1 {
				t.Fatalf("%d model_request events, want 1", len(calls))
			}
			r := &fxRun{body: body, mc: calls[0], prompt: e.tmpl.Tokenizer().Decode(calls[0].PromptIDs), answer: answer}
			var got any
			if err := json.Unmarshal(r.mc.Request, &got); err != nil || !reflect.DeepEqual(got, any(body)) {
				t.Fatalf("the event's request is not the body as sent (%v)", err)
			}
			e.checkChain(t, calls, map[string]string{"claude-code": api.ShapeMessages, "codex": api.ShapeResponses}[fx.cli])
			t.Logf("%s first-turn prompt: %d tokens (Qwen3); ignored: %q", fx.cli, len(r.mc.PromptIDs), r.mc.Ignored)
			names := make([]string, 0, len(checks))
			for n := range checks {
				names = append(names, n)
			}
			slices.Sort(names)
			for _, n := range names {
				t.Run(n, func(t *testing.T) { checks[n](t, r) })
			}
		})
	}
}

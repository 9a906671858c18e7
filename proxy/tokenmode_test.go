package proxy_test

import (
	"bufio"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/engine/upstream"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// upstreamEnv is a gateway on loopback over SQLite whose backend is the
// vLLM-format upstream v in token mode (a TokenBackend over
// upstream.NewTokenEngine, as `engine.upstream` with tokenizer_dir builds
// it) or chat mode (UpstreamBackend).
func upstreamEnv(t testing.TB, v *vllmServer, mode string) (*env, *upstream.Client) {
	cl, err := upstream.New(upstream.Config{Models: []upstream.Model{{Name: "Qwen/Qwen3-8B", Endpoints: []string{v.url()}, Version: 4}}, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var b proxy.Backend = proxy.NewUpstreamBackend(cl)
	if mode == upstream.ModeToken {
		b = proxy.NewTokenBackend(upstream.NewTokenEngine(cl, "", 40960), v.ml, v.ml.Tokenizer(), 0)
	}
	return newEnv(t, proxy.Config{}, b), cl
}

// runFixtureHarness plays the harness side of the fixture conversation
// with the OpenAI SDK: it sends the system and user messages, and after
// each reply appends the reply as the SDK returns it (reasoning dropped,
// as harnesses do) and the fixture's tool results, under the tool call ids
// the gateway gave. It checks each reply's tool calls and text against the
// fixture.
func runFixtureHarness(t testing.TB, baseURL, key string, fx convFixture) {
	t.Helper()
	client := openai.NewClient(option.WithBaseURL(baseURL), option.WithAPIKey(key), option.WithMaxRetries(0))
	var tools []openai.ChatCompletionToolUnionParam
	for _, tl := range fx.Tools {
		fd := shared.FunctionDefinitionParam{Name: tl.Name, Description: openai.String(tl.Description)}
		if len(tl.Parameters) > 0 {
			if err := json.Unmarshal(tl.Parameters, &fd.Parameters); err != nil {
				t.Fatal(err)
			}
		}
		tools = append(tools, openai.ChatCompletionFunctionTool(fd))
	}
	params := openai.ChatCompletionNewParams{Model: "Qwen/Qwen3-8B", Tools: tools}
	ids := map[string]string{} // fixture tool call id → the gateway's
	for i, m := range fx.Messages {
		switch m.Role {
		case chat.RoleSystem:
			params.Messages = append(params.Messages, openai.SystemMessage(m.Content))
		case chat.RoleUser:
			params.Messages = append(params.Messages, openai.UserMessage(m.Content))
		case chat.RoleTool:
			params.Messages = append(params.Messages, openai.ToolMessage(m.Content, ids[m.ToolCallID]))
		case chat.RoleAssistant:
			resp, err := client.Chat.Completions.New(testCtx(t), params)
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
			got := resp.Choices[0].Message
			if len(got.ToolCalls) != len(m.ToolCalls) || trimmed(got.Content) != trimmed(m.Content) {
				t.Fatalf("message %d: reply %q with %d tool calls, want %q with %d", i, got.Content, len(got.ToolCalls), m.Content, len(m.ToolCalls))
			}
			for j, tc := range got.ToolCalls {
				if tc.Function.Name != m.ToolCalls[j].Name || tc.Function.Arguments != m.ToolCalls[j].Arguments {
					t.Fatalf("message %d: tool call %d is %s(%s), want %s(%s)", i, j, tc.Function.Name, tc.Function.Arguments, m.ToolCalls[j].Name, m.ToolCalls[j].Arguments)
				}
				ids[m.ToolCalls[j].ID] = tc.ID
			}
			wantFinish := "stop"
			if len(m.ToolCalls) > 0 {
				wantFinish = "tool_calls"
			}
			if resp.Choices[0].FinishReason != wantFinish {
				t.Errorf("message %d: finish %q, want %q", i, resp.Choices[0].FinishReason, wantFinish)
			}
			params.Messages = append(params.Messages, got.ToParam())
		}
	}
}

func trimmed(s string) string {
	return string(slices.DeleteFunc([]byte(s), func(c byte) bool { return c == ' ' || c == '\n' }))
}

type golden struct {
	Call     int    `json:"call"`
	Messages int    `json:"messages"`
	Text     string `json:"text"`
}

func loadGoldens(t testing.TB) []golden {
	f, err := os.Open("testdata/tokenmode/goldens.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []golden
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		var g golden
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			t.Fatal(err)
		}
		out = append(out, g)
	}
	return out
}

// TestTokenModeDrift is the token-mode drift test: a 10-call
// tool-calling conversation (tools, system prompt, parallel calls, a tool
// error, a second user turn, thinking) from the OpenAI SDK through the
// gateway to a vLLM-format /v1/completions upstream on loopback. Every
// call's prompt is token ids (vLLM tokenizes nothing), equal to the
// previous prompt + the ids vLLM generated + the new messages rendered by
// agl; decoded, each prompt is byte-identical to the Qwen3 Jinja
// template's render of the true conversation (goldens.jsonl, from
// gen_goldens.py); the events record exactly those ids.
//
// The same harness in chat mode (vLLM renders) shows the drift token mode
// removes: vLLM re-tokenizes every prompt in full, and the harness drops
// the reasoning, so later prompts no longer extend the earlier ones.
func TestTokenModeDrift(t *testing.T) {
	ml := qwen3ChatML(t)
	fx := loadConvFixture(t)
	replies, at := fx.replies()
	goldens := loadGoldens(t)
	if len(replies) != 10 || len(goldens) != 10 {
		t.Fatalf("fixture has %d replies and %d goldens, want 10", len(replies), len(goldens))
	}
	tok := ml.Tokenizer()
	type figures struct{ tokenized, drifted, prompt int }
	fig := map[string]*figures{}
	for _, mode := range []string{upstream.ModeToken, upstream.ModeChat} {
		t.Run(mode, func(t *testing.T) {
			v := newVLLMServer(t, ml)
			v.push(replies...)
			e, _ := upstreamEnv(t, v, mode)
			cl := e.claim(t, store.ModeTrain)
			runFixtureHarness(t, base(e.srv, cl)+"/v1", cl.Key, fx)
			seen := v.recorded()
			calls := e.calls(t, cl)
			if len(seen) != 10 || len(calls) != 10 {
				t.Fatalf("upstream saw %d calls, %d events; want 10", len(seen), len(calls))
			}
			f := &figures{}
			fig[mode] = f
			for k, c := range calls {
				s := seen[k]
				if !slices.Equal(c.PromptIDs, s.prompt) || !slices.Equal(c.ResponseIDs, s.output) || len(c.ResponseLogprobs) != len(s.output) {
					t.Errorf("call %d: recorded ids differ from what the upstream consumed/produced", k)
				}
				if c.Model != "Qwen/Qwen3-8B" || c.ModelVersion != 4 || c.API != api.ShapeChatCompletions {
					t.Errorf("call %d: model %q v%d api %q", k, c.Model, c.ModelVersion, c.API)
				}
				f.prompt += len(c.PromptIDs)
				if k > 0 {
					prev := append(slices.Clone(calls[k-1].PromptIDs), calls[k-1].ResponseIDs...)
					if len(c.PromptIDs) < len(prev) || !slices.Equal(c.PromptIDs[:len(prev)], prev) {
						f.drifted++
					}
				}
				if mode == upstream.ModeChat {
					f.tokenized += s.tokenized
					if s.path != "/v1/chat/completions" || !c.UpstreamRendered || c.RenderReason != proxy.ReasonUpstream {
						t.Errorf("call %d: path %s upstream_rendered=%v reason %q", k, s.path, c.UpstreamRendered, c.RenderReason)
					}
					continue
				}
				// Token mode.
				if s.path != "/v1/completions" || s.tokenized != 0 {
					t.Errorf("call %d: %s with the upstream tokenizing %d prompt tokens", k, s.path, s.tokenized)
				}
				if c.UpstreamRendered {
					t.Errorf("call %d: upstream_rendered in token mode", k)
				}
				if got := tok.Decode(c.PromptIDs); got != goldens[k].Text {
					t.Errorf("call %d: prompt differs from the Jinja render:\n got %q\nwant %q", k, got, goldens[k].Text)
				}
				truth := chat.Conversation{Tools: fx.Tools, Messages: fx.Messages[:at[k]]}
				if k == 0 {
					want, err := ml.Render(truth, true)
					if err != nil {
						t.Fatal(err)
					}
					if c.Continued || c.RenderReason != proxy.ReasonFirstCall || !slices.Equal(c.PromptIDs, want) {
						t.Errorf("call 0: continued=%v reason %q, or not the template's render", c.Continued, c.RenderReason)
					}
					f.tokenized += len(want)
					continue
				}
				suffix, err := ml.RenderSuffix(truth, at[k-1]+1)
				if err != nil {
					t.Fatal(err)
				}
				want := append(append(slices.Clone(calls[k-1].PromptIDs), calls[k-1].ResponseIDs...), suffix...)
				if !c.Continued || c.RenderReason != "" || !slices.Equal(c.PromptIDs, want) {
					t.Errorf("call %d: continued=%v reason %q; prompt is not previous prompt + generated ids + rendered new messages", k, c.Continued, c.RenderReason)
				}
				f.tokenized += len(suffix)
			}
		})
	}
	tf, cf := fig[upstream.ModeToken], fig[upstream.ModeChat]
	if tf == nil || cf == nil {
		return
	}
	t.Logf("10-call conversation: prompt tokens tokenized, token mode %d of %d (%.0f/call, by agl: new messages only), chat mode %d of %d (%.0f/call, by vLLM: every prompt in full); prompts not extending the previous call: token mode %d, chat mode %d",
		tf.tokenized, tf.prompt, float64(tf.tokenized)/10, cf.tokenized, cf.prompt, float64(cf.tokenized)/10, tf.drifted, cf.drifted)
	if tf.drifted != 0 {
		t.Errorf("token mode: %d calls drifted", tf.drifted)
	}
	if cf.tokenized != cf.prompt {
		t.Errorf("chat mode: vLLM tokenized %d of %d prompt tokens", cf.tokenized, cf.prompt)
	}
}

// TestTokenModeShapes: in token mode the vLLM upstream's generated ids
// are parsed back into each API's tool calls, and a tool loop continues
// the token state, for Anthropic Messages and Responses as for Chat
// Completions (TestTokenModeDrift).
func TestTokenModeShapes(t *testing.T) {
	weather := `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`
	tests := []struct {
		name, route, shape string
		first              string
		// next builds the second request from the first answer.
		next func(t *testing.T, first map[string]any) string
	}{
		{
			name: "anthropic", route: "/v1/messages", shape: api.ShapeMessages,
			first: `{"model":"claude","max_tokens":256,"tools":[{"name":"get_weather","description":"Weather.","input_schema":` + weather + `}],"messages":[{"role":"user","content":"Weather in Paris?"}]}`,
			next: func(t *testing.T, first map[string]any) string {
				content := first["content"].([]any)
				var use map[string]any
				for _, b := range content {
					if m := b.(map[string]any); m["type"] == "tool_use" {
						use = m
					}
				}
				if use == nil || use["name"] != "get_weather" || use["input"].(map[string]any)["city"] != "Paris" || first["stop_reason"] != "tool_use" {
					t.Fatalf("no get_weather tool_use: %v", first)
				}
				return `{"model":"claude","max_tokens":256,"tools":[{"name":"get_weather","description":"Weather.","input_schema":` + weather + `}],"messages":[{"role":"user","content":"Weather in Paris?"},` +
					`{"role":"assistant","content":` + mustJSON(t, content) + `},{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + use["id"].(string) + `","content":"18C"}]}]}`
			},
		},
		{
			name: "responses", route: "/v1/responses", shape: api.ShapeResponses,
			first: `{"model":"gpt","tools":[{"type":"function","name":"get_weather","description":"Weather.","parameters":` + weather + `}],"input":[{"role":"user","content":"Weather in Paris?"}]}`,
			next: func(t *testing.T, first map[string]any) string {
				var fc map[string]any
				for _, it := range first["output"].([]any) {
					if m := it.(map[string]any); m["type"] == "function_call" {
						fc = m
					}
				}
				if fc == nil || fc["name"] != "get_weather" || fc["arguments"] != `{"city": "Paris"}` {
					t.Fatalf("no get_weather function_call: %v", first)
				}
				return `{"model":"gpt","tools":[{"type":"function","name":"get_weather","description":"Weather.","parameters":` + weather + `}],"input":[{"role":"user","content":"Weather in Paris?"},` +
					mustJSON(t, fc) + `,{"type":"function_call_output","call_id":"` + fc["call_id"].(string) + `","output":"18C"}]}`
			},
		},
	}
	ml := qwen3ChatML(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := newVLLMServer(t, ml)
			v.push(chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{Name: "get_weather", Arguments: `{"city": "Paris"}`}}}, text("Paris: 18C."))
			e, _ := upstreamEnv(t, v, upstream.ModeToken)
			cl := e.claim(t, store.ModeTrain)
			hdr := map[string]string{"Authorization": "Bearer " + cl.Key, "anthropic-version": "2023-06-01"}
			st, _, out := post(t, "POST", base(e.srv, cl)+tc.route, hdr, tc.first)
			var first map[string]any
			if st != 200 || json.Unmarshal([]byte(out), &first) != nil {
				t.Fatalf("first call: %d %s", st, out)
			}
			st, _, out = post(t, "POST", base(e.srv, cl)+tc.route, hdr, tc.next(t, first))
			if st != 200 || !strings.Contains(out, "Paris: 18C.") {
				t.Fatalf("second call: %d %s", st, out)
			}
			calls, seen := e.calls(t, cl), v.recorded()
			if len(calls) != 2 || len(seen) != 2 {
				t.Fatalf("%d events, %d upstream calls", len(calls), len(seen))
			}
			for k, c := range calls {
				if c.API != tc.shape || seen[k].path != "/v1/completions" || seen[k].tokenized != 0 || !slices.Equal(c.PromptIDs, seen[k].prompt) || c.UpstreamRendered {
					t.Errorf("call %d: api %s via %s, tokenized %d", k, c.API, seen[k].path, seen[k].tokenized)
				}
			}
			prev := append(slices.Clone(calls[0].PromptIDs), calls[0].ResponseIDs...)
			if !calls[1].Continued || !slices.Equal(calls[1].PromptIDs[:len(prev)], prev) {
				t.Errorf("second call does not continue the first (%s)", calls[1].RenderReason)
			}
		})
	}
}

package proxy_test

import (
	"slices"
	"testing"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

var weatherParams = map[string]any{
	"type":       "object",
	"properties": map[string]any{"city": map[string]any{"type": "string"}},
	"required":   []string{"city"},
}

// TestOpenAIChatToolLoop drives a multi-turn tool-calling conversation with
// the official openai-go SDK, streaming and not, and checks that the
// recorded ids concatenate exactly across turns.
func TestOpenAIChatToolLoop(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "stream"}[stream], func(t *testing.T) {
			e := newEnv(t, proxy.Config{}, nil)
			cl := e.claim(t, store.ModeTrain)
			e.eng.Push(
				toolCall("get_weather", `{"city": "Paris"}`),
				toolCall("get_weather", `{"city": "Lyon"}`),
				text("Sunny in Paris, rainy in Lyon."),
			)
			client := openai.NewClient(option.WithBaseURL(base(e.srv, cl)+"/v1"), option.WithAPIKey(cl.Key), option.WithMaxRetries(0))
			ctx := testCtx(t)
			params := openai.ChatCompletionNewParams{
				Model: "gpt-4o",
				Messages: []openai.ChatCompletionMessageParamUnion{
					openai.SystemMessage("You are a weather bot."),
					openai.UserMessage("Weather in Paris and Lyon?"),
				},
				Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
					Name: "get_weather", Description: openai.String("Current weather of a city"), Parameters: weatherParams,
				})},
			}
			if stream {
				params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			}
			turn := func() (openai.ChatCompletionMessage, string) {
				t.Helper()
				if !stream {
					resp, err := client.Chat.Completions.New(ctx, params)
					if err != nil {
						t.Fatal(err)
					}
					if resp.Usage.CompletionTokens == 0 {
						t.Error("no usage")
					}
					return resp.Choices[0].Message, resp.Choices[0].FinishReason
				}
				s := client.Chat.Completions.NewStreaming(ctx, params)
				acc := openai.ChatCompletionAccumulator{}
				for s.Next() {
					acc.AddChunk(s.Current())
				}
				if err := s.Err(); err != nil {
					t.Fatal(err)
				}
				if acc.Usage.CompletionTokens == 0 {
					t.Error("stream_options.include_usage: no usage chunk")
				}
				return acc.Choices[0].Message, acc.Choices[0].FinishReason
			}
			for i, city := range []string{"Paris", "Lyon"} {
				msg, fin := turn()
				if fin != "tool_calls" || len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "get_weather" {
					t.Fatalf("turn %d: finish %q, tool calls %+v", i, fin, msg.ToolCalls)
				}
				if got := msg.ToolCalls[0].Function.Arguments; got != `{"city": "`+city+`"}` {
					t.Fatalf("turn %d: arguments %q", i, got)
				}
				params.Messages = append(params.Messages, msg.ToParam(), openai.ToolMessage("weather of "+city, msg.ToolCalls[0].ID))
			}
			msg, fin := turn()
			if fin != "stop" || msg.Content != "Sunny in Paris, rainy in Lyon." {
				t.Fatalf("final: finish %q content %q", fin, msg.Content)
			}
			calls := e.calls(t, cl)
			if len(calls) != 3 {
				t.Fatalf("%d model_request events, want 3", len(calls))
			}
			e.checkChain(t, calls, api.ShapeChatCompletions)
			// Continuing the token state gives what rendering the whole
			// conversation from scratch gives (the template's extension
			// property), so nothing was re-tokenized differently.
			conv := chat.Conversation{
				Messages: []chat.Message{
					{Role: chat.RoleSystem, Content: "You are a weather bot."},
					{Role: chat.RoleUser, Content: "Weather in Paris and Lyon?"},
				},
				Tools: []chat.Tool{{Name: "get_weather", Description: "Current weather of a city", Parameters: []byte(mustJSON(t, weatherParams))}},
			}
			for i, city := range []string{"Paris", "Lyon"} {
				m := toolCall("get_weather", `{"city": "`+city+`"}`)
				m.ToolCalls[0].ID = calls[i].CallID
				conv.Messages = append(conv.Messages, m, chat.Message{Role: chat.RoleTool, Content: "weather of " + city, ToolCallID: calls[i].CallID})
			}
			want, err := e.tmpl.Render(conv, true)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(calls[2].PromptIDs, want) {
				t.Errorf("continued prompt differs from a fresh render of the same conversation")
			}
			for _, c := range calls {
				if c.Stream != stream {
					t.Errorf("event stream=%v, want %v", c.Stream, stream)
				}
			}
		})
	}
}

// TestOpenAIResponsesToolLoop drives the Responses API with openai-go.
func TestOpenAIResponsesToolLoop(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "stream"}[stream], func(t *testing.T) {
			e := newEnv(t, proxy.Config{}, nil)
			cl := e.claim(t, store.ModeTrain)
			e.eng.Push(toolCall("get_weather", `{"city": "Oslo"}`), text("Snowy in Oslo."))
			client := openai.NewClient(option.WithBaseURL(base(e.srv, cl)+"/v1"), option.WithAPIKey(cl.Key), option.WithMaxRetries(0))
			ctx := testCtx(t)
			input := responses.ResponseInputParam{
				responses.ResponseInputItemParamOfMessage("Weather in Oslo?", responses.EasyInputMessageRoleUser),
			}
			params := func() responses.ResponseNewParams {
				return responses.ResponseNewParams{
					Model:        "gpt-5",
					Instructions: openai.String("Be brief."),
					Input:        responses.ResponseNewParamsInputUnion{OfInputItemList: input},
					Store:        openai.Bool(false),
					Tools: []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{
						Name: "get_weather", Parameters: weatherParams, Strict: openai.Bool(false),
					}}},
				}
			}
			turn := func() *responses.Response {
				t.Helper()
				if !stream {
					r, err := client.Responses.New(ctx, params())
					if err != nil {
						t.Fatal(err)
					}
					return r
				}
				s := client.Responses.NewStreaming(ctx, params())
				var final *responses.Response
				var deltas string
				for s.Next() {
					ev := s.Current()
					switch ev.Type {
					case "response.completed":
						r := ev.Response
						final = &r
					case "response.output_text.delta":
						deltas += ev.Delta
					}
				}
				if err := s.Err(); err != nil {
					t.Fatal(err)
				}
				if final == nil {
					t.Fatal("stream had no response.completed")
				}
				if deltas != final.OutputText() {
					t.Errorf("streamed text %q, final %q", deltas, final.OutputText())
				}
				return final
			}
			r := turn()
			var fc *responses.ResponseFunctionToolCall
			for _, it := range r.Output {
				if it.Type == "function_call" {
					c := it.AsFunctionCall()
					fc = &c
				}
			}
			if fc == nil || fc.Name != "get_weather" || fc.Arguments != `{"city": "Oslo"}` {
				t.Fatalf("no get_weather call in %s", r.RawJSON())
			}
			for _, it := range r.Output {
				switch it.Type {
				case "function_call":
					input = append(input, responses.ResponseInputItemParamOfFunctionCall(it.Arguments.OfString, it.CallID, it.Name))
				case "message":
					input = append(input, responses.ResponseInputItemParamOfMessage(it.AsMessage().Content[0].Text, responses.EasyInputMessageRoleAssistant))
				}
			}
			input = append(input, responses.ResponseInputItemUnionParam{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
				CallID: openai.String(fc.CallID), Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String("-5C, snow")},
			}})
			r = turn()
			if r.OutputText() != "Snowy in Oslo." || r.Status != "completed" {
				t.Fatalf("final %q status %q", r.OutputText(), r.Status)
			}
			e.checkChain(t, e.calls(t, cl), api.ShapeResponses)
		})
	}
}

// TestResponsesCustomTool: a freeform (custom) tool, as Codex declares
// apply_patch, round-trips as custom_tool_call items, streaming and not.
func TestResponsesCustomTool(t *testing.T) {
	for _, stream := range []bool{false, true} {
		e := newEnv(t, proxy.Config{}, nil)
		cl := e.claim(t, store.ModeTrain)
		patch := "*** Begin Patch\n*** Add File: a.txt\n+hi \"there\"\n*** End Patch"
		e.eng.Push(toolCall("apply_patch", mustJSON(t, map[string]string{"input": patch})), text("Patched."))
		client := openai.NewClient(option.WithBaseURL(base(e.srv, cl)+"/v1"), option.WithAPIKey(cl.Key), option.WithMaxRetries(0))
		ctx := testCtx(t)
		input := responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage("Add a.txt", responses.EasyInputMessageRoleUser)}
		params := func() responses.ResponseNewParams {
			return responses.ResponseNewParams{Model: "gpt-5-codex", Input: responses.ResponseNewParamsInputUnion{OfInputItemList: input},
				Tools: []responses.ToolUnionParam{{OfCustom: &responses.CustomToolParam{Name: "apply_patch"}}}}
		}
		turn := func() *responses.Response {
			if !stream {
				r, err := client.Responses.New(ctx, params())
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			s := client.Responses.NewStreaming(ctx, params())
			var final *responses.Response
			var delta string
			for s.Next() {
				switch ev := s.Current(); ev.Type {
				case "response.completed":
					r := ev.Response
					final = &r
				case "response.custom_tool_call_input.delta":
					delta += ev.Delta
				}
			}
			if err := s.Err(); err != nil || final == nil {
				t.Fatalf("stream: %v", err)
			}
			if len(final.Output) > 0 && final.Output[0].Type == "custom_tool_call" && delta != patch {
				t.Errorf("streamed input %q", delta)
			}
			return final
		}
		r := turn()
		if len(r.Output) != 1 || r.Output[0].Type != "custom_tool_call" {
			t.Fatalf("output %s", r.RawJSON())
		}
		ctc := r.Output[0].AsCustomToolCall()
		if ctc.Input != patch || ctc.Name != "apply_patch" {
			t.Fatalf("custom call %+v", ctc)
		}
		input = append(input,
			responses.ResponseInputItemUnionParam{OfCustomToolCall: &responses.ResponseCustomToolCallParam{CallID: ctc.CallID, Name: ctc.Name, Input: ctc.Input}},
			responses.ResponseInputItemUnionParam{OfCustomToolCallOutput: &responses.ResponseCustomToolCallOutputParam{CallID: ctc.CallID, Output: responses.ResponseCustomToolCallOutputOutputUnionParam{OfString: openai.String("Done!")}}})
		if r = turn(); r.OutputText() != "Patched." {
			t.Fatalf("final %s", r.RawJSON())
		}
		e.checkChain(t, e.calls(t, cl), api.ShapeResponses)
	}
}

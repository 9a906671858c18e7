package proxy_test

import (
	"encoding/json"
	"testing"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// TestAnthropicToolLoop drives a multi-turn tool-calling conversation with
// the official anthropic-sdk-go, streaming and not.
func TestAnthropicToolLoop(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "stream"}[stream], func(t *testing.T) {
			e := newEnv(t, proxy.Config{}, nil)
			cl := e.claim(t, store.ModeTrain)
			e.eng.Push(
				toolCall("read_file", `{"path": "a.txt"}`),
				toolCall("read_file", `{"path": "b.txt"}`),
				text("Both files say hello."),
			)
			client := anthropic.NewClient(option.WithBaseURL(base(e.srv, cl)), option.WithAPIKey(cl.Key), option.WithMaxRetries(0))
			ctx := testCtx(t)
			params := anthropic.MessageNewParams{
				Model:     "claude-sonnet-4-5",
				MaxTokens: 1024,
				System:    []anthropic.TextBlockParam{{Text: "You are a coding agent."}},
				Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("What do a.txt and b.txt say?"))},
				Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{
					Name: "read_file", Description: anthropic.String("Read a file"),
					InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"path": map[string]any{"type": "string"}}, Required: []string{"path"}},
				}}},
			}
			turn := func() *anthropic.Message {
				t.Helper()
				if !stream {
					m, err := client.Messages.New(ctx, params)
					if err != nil {
						t.Fatal(err)
					}
					return m
				}
				s := client.Messages.NewStreaming(ctx, params)
				var acc anthropic.Message
				for s.Next() {
					if err := acc.Accumulate(s.Current()); err != nil {
						t.Fatal(err)
					}
				}
				if err := s.Err(); err != nil {
					t.Fatal(err)
				}
				return &acc
			}
			for i, path := range []string{"a.txt", "b.txt"} {
				m := turn()
				if m.StopReason != anthropic.StopReasonToolUse {
					t.Fatalf("turn %d: stop reason %q", i, m.StopReason)
				}
				var use *anthropic.ContentBlockUnion
				for j := range m.Content {
					if m.Content[j].Type == "tool_use" {
						use = &m.Content[j]
					}
				}
				if use == nil || use.Name != "read_file" {
					t.Fatalf("turn %d: no read_file tool_use in %s", i, m.RawJSON())
				}
				var in struct{ Path string }
				if err := json.Unmarshal(use.Input, &in); err != nil || in.Path != path {
					t.Fatalf("turn %d: input %s", i, use.Input)
				}
				params.Messages = append(params.Messages, m.ToParam(),
					anthropic.NewUserMessage(anthropic.NewToolResultBlock(use.ID, "hello from "+path, false)))
			}
			m := turn()
			if m.StopReason != anthropic.StopReasonEndTurn || len(m.Content) != 1 || m.Content[0].Text != "Both files say hello." {
				t.Fatalf("final: %s", m.RawJSON())
			}
			if m.Usage.OutputTokens == 0 || m.Usage.InputTokens == 0 {
				t.Errorf("usage %+v", m.Usage)
			}
			calls := e.calls(t, cl)
			if len(calls) != 3 {
				t.Fatalf("%d events, want 3", len(calls))
			}
			e.checkChain(t, calls, api.ShapeMessages)
		})
	}
}

// TestAnthropicCountTokens: /v1/messages/count_tokens counts the rendered prompt.
func TestAnthropicCountTokens(t *testing.T) {
	e := newEnv(t, proxy.Config{}, nil)
	cl := e.claim(t, store.ModeTrain)
	client := anthropic.NewClient(option.WithBaseURL(base(e.srv, cl)), option.WithAPIKey(cl.Key), option.WithMaxRetries(0))
	n, err := client.Messages.CountTokens(testCtx(t), anthropic.MessageCountTokensParams{
		Model:    "claude",
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))},
	})
	if err != nil {
		t.Fatal(err)
	}
	want, err := e.tmpl.Render(chat.Conversation{Messages: []chat.Message{{Role: "user", Content: "hello"}}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if int(n.InputTokens) != len(want) {
		t.Fatalf("count %d, want %d", n.InputTokens, len(want))
	}
}

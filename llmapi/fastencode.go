package llmapi

import (
	"strconv"

	"github.com/aglrl/agl/internal/fastjson"
)

// AppendChatResponse appends r as JSON exactly as json.Marshal writes it
// (same keys, order, omitempty rules and escaping), without reflection:
// every Chat Completions and Completions answer and stream chunk is one.
func AppendChatResponse(b []byte, r *ChatResponse) []byte {
	b = append(b, `{"id":`...)
	b = fastjson.AppendString(b, r.ID)
	b = append(b, `,"object":`...)
	b = fastjson.AppendString(b, r.Object)
	b = append(b, `,"created":`...)
	b = strconv.AppendInt(b, r.Created, 10)
	b = append(b, `,"model":`...)
	b = fastjson.AppendString(b, r.Model)
	b = append(b, `,"choices":`...)
	if r.Choices == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range r.Choices {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendChatChoice(b, &r.Choices[i])
		}
		b = append(b, ']')
	}
	if u := r.Usage; u != nil {
		b = append(b, `,"usage":{"prompt_tokens":`...)
		b = strconv.AppendInt(b, int64(u.PromptTokens), 10)
		b = append(b, `,"completion_tokens":`...)
		b = strconv.AppendInt(b, int64(u.CompletionTokens), 10)
		b = append(b, `,"total_tokens":`...)
		b = strconv.AppendInt(b, int64(u.TotalTokens), 10)
		b = append(b, '}')
	}
	return append(b, '}')
}

func appendChatChoice(b []byte, c *ChatChoice) []byte {
	b = append(b, `{"index":`...)
	b = strconv.AppendInt(b, int64(c.Index), 10)
	if m := c.Message; m != nil {
		b = append(b, `,"message":{"role":`...)
		b = fastjson.AppendString(b, m.Role)
		b = append(b, `,"content":`...)
		b = appendStringPtr(b, m.Content)
		b = appendReasoningAndCalls(b, m.ReasoningContent, m.ToolCalls)
		b = append(b, '}')
	}
	if d := c.Delta; d != nil {
		b = append(b, `,"delta":{`...)
		n := len(b)
		if d.Role != "" {
			b = append(b, `"role":`...)
			b = fastjson.AppendString(b, d.Role)
		}
		if d.Content != nil {
			if len(b) > n {
				b = append(b, ',')
			}
			b = append(b, `"content":`...)
			b = fastjson.AppendString(b, *d.Content)
		}
		k := len(b)
		b = appendReasoningAndCalls(b, d.ReasoningContent, d.ToolCalls)
		if k == n && len(b) > k {
			// The first member: drop its leading comma.
			b = append(b[:k], b[k+1:]...)
		}
		b = append(b, '}')
	}
	if c.Text != nil {
		b = append(b, `,"text":`...)
		b = fastjson.AppendString(b, *c.Text)
	}
	if c.Logprobs != nil {
		b = append(b, `,"logprobs":{}`...)
	} else {
		b = append(b, `,"logprobs":null`...)
	}
	b = append(b, `,"finish_reason":`...)
	b = appendStringPtr(b, c.FinishReason)
	return append(b, '}')
}

// appendReasoningAndCalls appends the omitempty reasoning_content and
// tool_calls members, each with a leading comma.
func appendReasoningAndCalls(b []byte, reasoning string, calls []ChatToolCall) []byte {
	if reasoning != "" {
		b = append(b, `,"reasoning_content":`...)
		b = fastjson.AppendString(b, reasoning)
	}
	if len(calls) == 0 {
		return b
	}
	b = append(b, `,"tool_calls":[`...)
	for i := range calls {
		tc := &calls[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		if tc.Index != nil {
			b = append(b, `"index":`...)
			b = strconv.AppendInt(b, int64(*tc.Index), 10)
			b = append(b, ',')
		}
		if tc.ID != "" {
			b = append(b, `"id":`...)
			b = fastjson.AppendString(b, tc.ID)
			b = append(b, ',')
		}
		if tc.Type != "" {
			b = append(b, `"type":`...)
			b = fastjson.AppendString(b, tc.Type)
			b = append(b, ',')
		}
		b = append(b, `"function":{`...)
		if tc.Function.Name != "" {
			b = append(b, `"name":`...)
			b = fastjson.AppendString(b, tc.Function.Name)
			b = append(b, ',')
		}
		b = append(b, `"arguments":`...)
		b = fastjson.AppendString(b, tc.Function.Arguments)
		b = append(b, "}}"...)
	}
	return append(b, ']')
}

func appendStringPtr(b []byte, s *string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	return fastjson.AppendString(b, *s)
}

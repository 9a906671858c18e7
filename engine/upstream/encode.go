package upstream

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/aglrl/agl/internal/fastjson"
)

// appendRequest appends w as JSON exactly as json.Marshal writes it,
// without reflection; false (b then undefined) for what it does not write
// (a prompt or logprobs of another type, a NaN or infinite float), which
// the caller then marshals with encoding/json.
func appendRequest(b []byte, w *wireRequest) ([]byte, bool) {
	b = append(b, `{"model":`...)
	b = fastjson.AppendString(b, w.Model)
	if len(w.Messages) > 0 {
		b = append(b, `,"messages":[`...)
		for i := range w.Messages {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendMessage(b, &w.Messages[i])
		}
		b = append(b, ']')
	}
	switch p := w.Prompt.(type) {
	case nil:
	case string:
		b = append(b, `,"prompt":`...)
		b = fastjson.AppendString(b, p)
	case []int32:
		b = append(b, `,"prompt":`...)
		b = fastjson.AppendInt32s(b, p)
	default:
		return b, false
	}
	if len(w.Tools) > 0 {
		b = append(b, `,"tools":[`...)
		for i := range w.Tools {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendTool(b, &w.Tools[i]); !ok {
				return b, false
			}
		}
		b = append(b, ']')
	}
	var ok bool
	b = append(b, `,"temperature":`...)
	if b, ok = fastjson.AppendFloat32(b, w.Temperature); !ok {
		return b, false
	}
	if w.TopP != 0 {
		b = append(b, `,"top_p":`...)
		if b, ok = fastjson.AppendFloat32(b, w.TopP); !ok {
			return b, false
		}
	}
	if w.TopK != 0 {
		b = append(b, `,"top_k":`...)
		b = strconv.AppendInt(b, int64(w.TopK), 10)
	}
	if w.MaxTokens != 0 {
		b = append(b, `,"max_tokens":`...)
		b = strconv.AppendInt(b, int64(w.MaxTokens), 10)
	}
	if w.Seed != nil {
		b = append(b, `,"seed":`...)
		b = strconv.AppendUint(b, *w.Seed, 10)
	}
	if len(w.Stop) > 0 {
		b = append(b, `,"stop":[`...)
		for i, s := range w.Stop {
			if i > 0 {
				b = append(b, ',')
			}
			b = fastjson.AppendString(b, s)
		}
		b = append(b, ']')
	}
	if len(w.StopTokenIDs) > 0 {
		b = append(b, `,"stop_token_ids":`...)
		b = fastjson.AppendInt32s(b, w.StopTokenIDs)
	}
	b = append(b, `,"logprobs":`...)
	switch l := w.Logprobs.(type) {
	case nil:
		b = append(b, "null"...)
	case bool:
		b = strconv.AppendBool(b, l)
	case int:
		b = strconv.AppendInt(b, int64(l), 10)
	default:
		return b, false
	}
	b = append(b, `,"return_token_ids":`...)
	b = strconv.AppendBool(b, w.ReturnTokenIDs)
	b = append(b, `,"stream":`...)
	b = strconv.AppendBool(b, w.Stream)
	return append(b, '}'), true
}

func appendMessage(b []byte, m *wireMessage) []byte {
	b = append(b, `{"role":`...)
	b = fastjson.AppendString(b, m.Role)
	b = append(b, `,"content":`...)
	if m.Content == nil {
		b = append(b, "null"...)
	} else {
		b = fastjson.AppendString(b, *m.Content)
	}
	if len(m.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i := range m.ToolCalls {
			tc := &m.ToolCalls[i]
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"id":`...)
			b = fastjson.AppendString(b, tc.ID)
			b = append(b, `,"type":`...)
			b = fastjson.AppendString(b, tc.Type)
			b = append(b, `,"function":{"name":`...)
			b = fastjson.AppendString(b, tc.Function.Name)
			b = append(b, `,"arguments":`...)
			b = fastjson.AppendString(b, tc.Function.Arguments)
			b = append(b, "}}"...)
		}
		b = append(b, ']')
	}
	if m.ToolCallID != "" {
		b = append(b, `,"tool_call_id":`...)
		b = fastjson.AppendString(b, m.ToolCallID)
	}
	if m.Name != "" {
		b = append(b, `,"name":`...)
		b = fastjson.AppendString(b, m.Name)
	}
	return append(b, '}')
}

func appendTool(b []byte, t *wireTool) ([]byte, bool) {
	f := &t.Function
	b = append(b, `{"type":`...)
	b = fastjson.AppendString(b, t.Type)
	b = append(b, `,"function":{"name":`...)
	b = fastjson.AppendString(b, f.Name)
	if f.Description != "" {
		b = append(b, `,"description":`...)
		b = fastjson.AppendString(b, f.Description)
	}
	if len(f.Parameters) > 0 {
		b = append(b, `,"parameters":`...)
		var ok bool
		if b, ok = appendRaw(b, f.Parameters); !ok {
			return b, false
		}
	}
	if f.Arguments != nil {
		b = append(b, `,"arguments":`...)
		b = fastjson.AppendString(b, *f.Arguments)
	}
	return append(b, "}}"...), true
}

// appendRaw appends raw JSON as json.Marshal writes a json.RawMessage:
// validated, compacted and HTML-escaped.
func appendRaw(b, raw []byte) ([]byte, bool) {
	if bytes.ContainsAny(raw, " \t\r\n<>&\u2028\u2029") {
		var c bytes.Buffer
		if json.Compact(&c, raw) != nil {
			return b, false
		}
		var h bytes.Buffer
		json.HTMLEscape(&h, c.Bytes())
		return append(b, h.Bytes()...), true
	}
	if !json.Valid(raw) {
		return b, false
	}
	return append(b, raw...), true
}

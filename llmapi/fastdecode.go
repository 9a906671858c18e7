package llmapi

import (
	"encoding/json"

	"github.com/aglrl/agl/internal/fastjson"
)

// Reflection-free decoding of Chat Completions requests, the gateway's most
// common call. Each function reads exactly what json.Unmarshal would into
// the same types and reports false on anything it does not read alike
// (see package fastjson).

// DecodeChatFast decodes a Chat Completions request body into r as
// json.Unmarshal would, and reports false where it cannot: then r is to
// be reset and the body decoded with encoding/json.
func DecodeChatFast(body []byte, r *ChatRequest) bool {
	s := fastjson.New(body)
	o, ok := s.Object()
	if !ok {
		return false
	}
	for {
		switch o.Keys("model", "messages", "tools", "tool_choice", "functions", "temperature", "top_p", "top_k",
			"max_tokens", "max_completion_tokens", "n", "stop", "seed", "stream", "stream_options",
			"response_format", "logprobs", "top_logprobs", "logit_bias", "presence_penalty",
			"frequency_penalty", "modalities", "audio", "prediction", "web_search_options") {
		case -1:
			return o.OK() && s.End()
		case 0:
			ok = s.StringOrNull(&r.Model)
		case 1:
			ok = fjMessages(s, &r.Messages)
		case 2:
			ok = fjTools(s, &r.Tools)
		case 3:
			r.ToolChoice, ok = s.Raw()
		case 4:
			r.Functions, ok = s.Raw()
		case 5:
			r.Temperature, ok = fjFloat32Ptr(s)
		case 6:
			r.TopP, ok = fjFloat32Ptr(s)
		case 7:
			r.TopK, ok = fjIntPtr(s)
		case 8:
			r.MaxTokens, ok = fjIntPtr(s)
		case 9:
			r.MaxCompletionTokens, ok = fjIntPtr(s)
		case 10:
			r.N, ok = fjIntPtr(s)
		case 11:
			r.Stop, ok = s.Raw()
		case 12:
			if !s.Null() {
				var v int64
				v, ok = s.Int(64)
				r.Seed = &v
			}
		case 13:
			ok = fjBool(s, &r.Stream)
		case 14:
			if !s.Null() {
				r.StreamOptions = &struct {
					IncludeUsage bool `json:"include_usage"`
				}{}
				ok = s.Fields(func(k int) bool { return fjBool(s, &r.StreamOptions.IncludeUsage) }, "include_usage")
			}
		case 15:
			if !s.Null() {
				r.ResponseFormat = &struct {
					Type string `json:"type"`
				}{}
				ok = s.Fields(func(k int) bool { return s.StringOrNull(&r.ResponseFormat.Type) }, "type")
			}
		case 16:
			ok = fjBool(s, &r.Logprobs)
		case 17:
			r.TopLogprobs, ok = fjIntPtr(s)
		case 18:
			ok = s.Null() // a bias map goes to encoding/json (and is refused)
		case 19:
			r.PresencePenalty, ok = fjFloat64Ptr(s)
		case 20:
			r.FrequencyPenalty, ok = fjFloat64Ptr(s)
		case 21:
			r.Modalities, ok = fjStrings(s)
		case 22:
			r.Audio, ok = s.Raw()
		case 23:
			r.Prediction, ok = s.Raw()
		case 24:
			r.WebSearchOptions, ok = s.Raw()
		}
		if !ok {
			return false
		}
	}
}

func fjBool(s *fastjson.Scanner, v *bool) bool {
	if s.Null() {
		return true
	}
	var ok bool
	*v, ok = s.Bool()
	return ok
}

func fjIntPtr(s *fastjson.Scanner) (*int, bool) {
	if s.Null() {
		return nil, true
	}
	n, ok := s.Int(fastjson.IntBits)
	v := int(n)
	return &v, ok
}

func fjFloat32Ptr(s *fastjson.Scanner) (*float32, bool) {
	if s.Null() {
		return nil, true
	}
	f, ok := s.Float(32)
	v := float32(f)
	return &v, ok
}

func fjFloat64Ptr(s *fastjson.Scanner) (*float64, bool) {
	if s.Null() {
		return nil, true
	}
	f, ok := s.Float(64)
	return &f, ok
}

func fjStrings(s *fastjson.Scanner) ([]string, bool) {
	out := []string{}
	isArray, ok := s.Elems(func() bool {
		var v string
		ok := s.StringOrNull(&v)
		out = append(out, v)
		return ok
	})
	if !isArray {
		return nil, ok
	}
	return out, ok
}

func fjRaw(s *fastjson.Scanner, v *json.RawMessage) bool {
	var ok bool
	*v, ok = s.Raw()
	return ok
}

func fjMessages(s *fastjson.Scanner, out *[]ChatMessage) bool {
	ms := []ChatMessage{}
	isArray, ok := s.Elems(func() bool {
		ms = append(ms, ChatMessage{})
		m := &ms[len(ms)-1]
		return s.Fields(func(k int) bool {
			switch k {
			case 0:
				return s.StringOrNull(&m.Role)
			case 1:
				// A string is decoded here, once (decodeChat takes it).
				var ok bool
				m.Content, m.text, m.isText, ok = s.RawString()
				return ok
			case 2:
				return s.StringOrNull(&m.Name)
			case 3:
				return fjToolCalls(s, &m.ToolCalls)
			case 4:
				return s.StringOrNull(&m.ToolCallID)
			case 5:
				return s.StringOrNull(&m.ReasoningContent)
			case 6:
				return fjRaw(s, &m.FunctionCall)
			default:
				return fjRaw(s, &m.Audio)
			}
		}, "role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content", "function_call", "audio")
	})
	if isArray {
		*out = ms
	} else {
		*out = nil
	}
	return ok
}

func fjToolCalls(s *fastjson.Scanner, out *[]ChatToolCall) bool {
	tcs := []ChatToolCall{}
	isArray, ok := s.Elems(func() bool {
		tcs = append(tcs, ChatToolCall{})
		tc := &tcs[len(tcs)-1]
		return s.Fields(func(k int) bool {
			switch k {
			case 0:
				var ok bool
				tc.Index, ok = fjIntPtr(s)
				return ok
			case 1:
				return s.StringOrNull(&tc.ID)
			case 2:
				return s.StringOrNull(&tc.Type)
			default:
				return s.Fields(func(k int) bool {
					if k == 0 {
						return s.StringOrNull(&tc.Function.Name)
					}
					return s.StringOrNull(&tc.Function.Arguments)
				}, "name", "arguments")
			}
		}, "index", "id", "type", "function")
	})
	if isArray {
		*out = tcs
	} else {
		*out = nil
	}
	return ok
}

func fjTools(s *fastjson.Scanner, out *[]ChatTool) bool {
	ts := []ChatTool{}
	isArray, ok := s.Elems(func() bool {
		ts = append(ts, ChatTool{})
		t := &ts[len(ts)-1]
		return s.Fields(func(k int) bool {
			if k == 0 {
				return s.StringOrNull(&t.Type)
			}
			return s.Fields(func(k int) bool {
				switch k {
				case 0:
					return s.StringOrNull(&t.Function.Name)
				case 1:
					return s.StringOrNull(&t.Function.Description)
				default:
					return fjRaw(s, &t.Function.Parameters)
				}
			}, "name", "description", "parameters")
		}, "type", "function")
	})
	if isArray {
		*out = ts
	} else {
		*out = nil
	}
	return ok
}

package upstream

import "github.com/aglrl/agl/internal/fastjson"

// decodeAnswer decodes an upstream answer into r without reflection, as
// json.Unmarshal would; it reports false (r then undefined) for anything
// it does not read exactly as json.Unmarshal does, which the caller then
// decodes with encoding/json.
func decodeAnswer(data []byte, r *wireResponse) bool {
	s := fastjson.New(data)
	if s.Null() { // json.Unmarshal leaves r as it is; so does the fallback
		return false
	}
	ok := s.Fields(func(k int) bool {
		switch k {
		case 0:
			return s.StringOrNull(&r.Model)
		case 1:
			return idsText(s, &r.PromptTokenIDs)
		case 2:
			return choices(s, &r.Choices)
		default:
			return s.Fields(func(k int) bool {
				if k == 0 {
					return integer(s, &r.Usage.PromptTokens)
				}
				return integer(s, &r.Usage.CompletionTokens)
			}, "prompt_tokens", "completion_tokens")
		}
	}, "model", "prompt_token_ids", "choices", "usage")
	return ok && s.End()
}

// idsText reads a prompt's token ids as their JSON text: an array as
// encoding/json writes one is kept as it is (ids.canonical), anything else
// as raw JSON for promptIDs to decode.
func idsText(s *fastjson.Scanner, ids *wireIDs) bool {
	if t, n, ok := s.Int32sText(); ok {
		*ids = wireIDs{raw: t, canonical: true, n: n}
		return true
	}
	raw, ok := s.Raw()
	*ids = wireIDs{raw: raw}
	return ok
}

func integer(s *fastjson.Scanner, v *int) bool {
	if s.Null() {
		return true
	}
	n, ok := s.Int(fastjson.IntBits)
	*v = int(n)
	return ok
}

func choices(s *fastjson.Scanner, out *[]wireChoice) bool {
	cs := []wireChoice{}
	isArray, ok := s.Elems(func() bool {
		cs = append(cs, wireChoice{})
		return choice(s, &cs[len(cs)-1])
	})
	if isArray {
		*out = cs
	} else {
		*out = nil
	}
	return ok
}

func choice(s *fastjson.Scanner, c *wireChoice) bool {
	return s.Fields(func(k int) bool {
		var ok bool
		switch k {
		case 0:
			return message(s, c)
		case 1:
			return s.StringOrNull(&c.Text)
		case 2:
			return s.StringOrNull(&c.FinishReason)
		case 3:
			c.TokenIDs, ok = s.Int32s()
		case 4:
			return idsText(s, &c.PromptTokenIDs)
		default:
			return logprobs(s, c)
		}
		return ok
	}, "message", "text", "finish_reason", "token_ids", "prompt_token_ids", "logprobs")
}

func message(s *fastjson.Scanner, c *wireChoice) bool {
	m := &c.Message
	return s.Fields(func(k int) bool {
		var ok bool
		switch k {
		case 0:
			if s.Null() {
				return true
			}
			var v string
			v, ok = s.String()
			m.Content = &v
		case 1:
			return s.StringOrNull(&m.ReasoningContent)
		case 2:
			return s.StringOrNull(&m.Reasoning)
		default:
			m.ToolCalls, ok = toolCalls(s)
		}
		return ok
	}, "content", "reasoning_content", "reasoning", "tool_calls")
}

func toolCalls(s *fastjson.Scanner) ([]wireToolCall, bool) {
	out := []wireToolCall{}
	isArray, ok := s.Elems(func() bool {
		out = append(out, wireToolCall{})
		tc := &out[len(out)-1]
		return s.Fields(func(k int) bool {
			switch k {
			case 0:
				return s.StringOrNull(&tc.ID)
			case 1:
				return s.StringOrNull(&tc.Type)
			default:
				return s.Fields(func(k int) bool {
					if k == 0 {
						return s.StringOrNull(&tc.Function.Name)
					}
					return s.StringOrNull(&tc.Function.Arguments)
				}, "name", "arguments")
			}
		}, "id", "type", "function")
	})
	if !isArray {
		return nil, ok
	}
	return out, ok
}

// logprobEntry is one element of the chat logprobs' content.
type logprobEntry = struct {
	Logprob float32 `json:"logprob"`
}

func logprobs(s *fastjson.Scanner, c *wireChoice) bool {
	if s.Null() {
		c.Logprobs = nil
		return true
	}
	lp := &struct {
		Content       []logprobEntry `json:"content"`
		TokenLogprobs []float32      `json:"token_logprobs"`
	}{}
	c.Logprobs = lp
	return s.Fields(func(k int) bool {
		var ok bool
		if k == 1 {
			lp.TokenLogprobs, ok = s.Float32s()
			return ok
		}
		content := []logprobEntry{}
		isArray, ok := s.Elems(func() bool {
			content = append(content, logprobEntry{})
			e := &content[len(content)-1]
			return s.Fields(func(int) bool {
				if s.Null() {
					return true
				}
				f, ok := s.Float(32)
				e.Logprob = float32(f)
				return ok
			}, "logprob")
		})
		if isArray {
			lp.Content = content
		} else {
			lp.Content = nil
		}
		return ok
	}, "content", "token_logprobs")
}

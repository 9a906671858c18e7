package upstream

import "github.com/aglrl/agl/internal/fastjson"

// decodeAnswer decodes an upstream answer into r without reflection, as
// json.Unmarshal would; it reports false (r then undefined) for anything
// it does not read exactly as json.Unmarshal does, which the caller then
// decodes with encoding/json.
func decodeAnswer(data []byte, r *wireResponse) bool {
	s := fastjson.New(data)
	o, ok := s.Object()
	if !ok {
		return false
	}
	for {
		switch o.Keys("model", "prompt_token_ids", "choices", "usage") {
		case -1:
			return o.OK() && s.End()
		case 0:
			ok = s.StringOrNull(&r.Model)
		case 1:
			r.PromptTokenIDs, ok = ids(s)
		case 2:
			ok = choices(s, &r.Choices)
		case 3:
			ok = usage(s, r)
		}
		if !ok {
			return false
		}
	}
}

func integer(s *fastjson.Scanner, v *int) bool {
	if s.Null() {
		return true
	}
	n, ok := s.Int(strconvIntSize)
	*v = int(n)
	return ok
}

const strconvIntSize = 32 << (^uint(0) >> 63)

// ids reads an array of int32 (null: nil; []: empty, not nil).
func ids(s *fastjson.Scanner) ([]int32, bool) {
	if s.Null() {
		return nil, true
	}
	a, ok := s.Array()
	if !ok {
		return nil, false
	}
	out := []int32{}
	for a.Next() {
		n, ok := s.Int(32)
		if !ok {
			return nil, false
		}
		out = append(out, int32(n))
	}
	return out, a.OK()
}

func float32s(s *fastjson.Scanner) ([]float32, bool) {
	if s.Null() {
		return nil, true
	}
	a, ok := s.Array()
	if !ok {
		return nil, false
	}
	out := []float32{}
	for a.Next() {
		f, ok := s.Float(32)
		if !ok {
			return nil, false
		}
		out = append(out, float32(f))
	}
	return out, a.OK()
}

func usage(s *fastjson.Scanner, r *wireResponse) bool {
	if s.Null() {
		return true
	}
	o, ok := s.Object()
	if !ok {
		return false
	}
	for {
		switch o.Keys("prompt_tokens", "completion_tokens") {
		case -1:
			return o.OK()
		case 0:
			ok = integer(s, &r.Usage.PromptTokens)
		case 1:
			ok = integer(s, &r.Usage.CompletionTokens)
		}
		if !ok {
			return false
		}
	}
}

func choices(s *fastjson.Scanner, out *[]wireChoice) bool {
	if s.Null() {
		*out = nil
		return true
	}
	a, ok := s.Array()
	if !ok {
		return false
	}
	cs := []wireChoice{}
	for a.Next() {
		var c wireChoice
		if !choice(s, &c) {
			return false
		}
		cs = append(cs, c)
	}
	*out = cs
	return a.OK()
}

func choice(s *fastjson.Scanner, c *wireChoice) bool {
	if s.Null() {
		return true
	}
	o, ok := s.Object()
	if !ok {
		return false
	}
	for {
		switch o.Keys("message", "text", "finish_reason", "token_ids", "prompt_token_ids", "logprobs") {
		case -1:
			return o.OK()
		case 0:
			ok = message(s, c)
		case 1:
			ok = s.StringOrNull(&c.Text)
		case 2:
			ok = s.StringOrNull(&c.FinishReason)
		case 3:
			c.TokenIDs, ok = ids(s)
		case 4:
			c.PromptTokenIDs, ok = ids(s)
		case 5:
			ok = logprobs(s, c)
		}
		if !ok {
			return false
		}
	}
}

func message(s *fastjson.Scanner, c *wireChoice) bool {
	if s.Null() {
		return true
	}
	o, ok := s.Object()
	if !ok {
		return false
	}
	m := &c.Message
	for {
		switch o.Keys("content", "reasoning_content", "reasoning", "tool_calls") {
		case -1:
			return o.OK()
		case 0:
			if !s.Null() {
				var v string
				v, ok = s.String()
				m.Content = &v
			}
		case 1:
			ok = s.StringOrNull(&m.ReasoningContent)
		case 2:
			ok = s.StringOrNull(&m.Reasoning)
		case 3:
			m.ToolCalls, ok = toolCalls(s)
		}
		if !ok {
			return false
		}
	}
}

func toolCalls(s *fastjson.Scanner) ([]wireToolCall, bool) {
	if s.Null() {
		return nil, true
	}
	a, ok := s.Array()
	if !ok {
		return nil, false
	}
	out := []wireToolCall{}
	for a.Next() {
		var tc wireToolCall
		if !s.Null() {
			o, ok := s.Object()
			if !ok {
				return nil, false
			}
		fields:
			for {
				switch o.Keys("id", "type", "function") {
				case -1:
					if !o.OK() {
						return nil, false
					}
					break fields
				case 0:
					ok = s.StringOrNull(&tc.ID)
				case 1:
					ok = s.StringOrNull(&tc.Type)
				case 2:
					ok = function(s, &tc)
				}
				if !ok {
					return nil, false
				}
			}
		}
		out = append(out, tc)
	}
	return out, a.OK()
}

func function(s *fastjson.Scanner, tc *wireToolCall) bool {
	if s.Null() {
		return true
	}
	o, ok := s.Object()
	if !ok {
		return false
	}
	for {
		switch o.Keys("name", "arguments") {
		case -1:
			return o.OK()
		case 0:
			ok = s.StringOrNull(&tc.Function.Name)
		case 1:
			ok = s.StringOrNull(&tc.Function.Arguments)
		}
		if !ok {
			return false
		}
	}
}

func logprobs(s *fastjson.Scanner, c *wireChoice) bool {
	if s.Null() {
		c.Logprobs = nil
		return true
	}
	o, ok := s.Object()
	if !ok {
		return false
	}
	lp := &struct {
		Content []struct {
			Logprob float32 `json:"logprob"`
		} `json:"content"`
		TokenLogprobs []float32 `json:"token_logprobs"`
	}{}
	c.Logprobs = lp
	for {
		switch o.Keys("content", "token_logprobs") {
		case -1:
			return o.OK()
		case 0:
			if s.Null() {
				lp.Content = nil
				break
			}
			a, isArray := s.Array()
			if !isArray {
				return false
			}
			lp.Content = lp.Content[:0]
			if lp.Content == nil {
				lp.Content = []struct {
					Logprob float32 `json:"logprob"`
				}{}
			}
			for a.Next() {
				var e struct {
					Logprob float32 `json:"logprob"`
				}
				if !s.Null() {
					eo, ok := s.Object()
					if !ok {
						return false
					}
					for k := eo.Keys("logprob"); k >= 0; k = eo.Keys("logprob") {
						if s.Null() {
							continue
						}
						f, ok := s.Float(32)
						if !ok {
							return false
						}
						e.Logprob = float32(f)
					}
					if !eo.OK() {
						return false
					}
				}
				lp.Content = append(lp.Content, e)
			}
			ok = a.OK()
		case 1:
			lp.TokenLogprobs, ok = float32s(s)
		}
		if !ok {
			return false
		}
	}
}

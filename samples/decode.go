package samples

import (
	"encoding/json"
	"errors"
	"strconv"

	"github.com/aglrl/agl/api"
)

// decodeCall decodes the fields of a "model_request" event that samples
// need, several times faster than encoding/json on id-heavy events: token
// arrays are parsed directly and the request/response bodies are skipped
// without being decoded. Anything it does not handle (escaped or non-ASCII
// strings, odd shapes, malformed JSON in the fields it reads) falls back to
// encoding/json, so the result is the same as json.Unmarshal into
// api.ModelCall restricted to those fields. One relaxation: a malformed
// number inside a skipped value (the request or response body) is not
// rejected; stored events were valid JSON when appended.
func decodeCall(data []byte) (api.ModelCall, error) {
	var c api.ModelCall
	if fastCall(data, &c) {
		return c, nil
	}
	var full api.ModelCall
	if err := json.Unmarshal(data, &full); err != nil {
		return api.ModelCall{}, err
	}
	return api.ModelCall{
		CallID: full.CallID, API: full.API, Model: full.Model, ModelVersion: full.ModelVersion,
		PromptIDs: full.PromptIDs, ResponseIDs: full.ResponseIDs, ResponseLogprobs: full.ResponseLogprobs,
		NoTokenIDs: full.NoTokenIDs, FinishReason: full.FinishReason, Continued: full.Continued, RenderReason: full.RenderReason,
	}, nil
}

var errSlow = errors.New("take the slow path")

type scan struct {
	b []byte
	i int
}

func (s *scan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scan) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scan) eat(c byte) bool {
	if s.peek() == c {
		s.i++
		return true
	}
	return false
}

// str reads a string without escapes (else errSlow).
func (s *scan) str() ([]byte, error) {
	if !s.eat('"') {
		return nil, errSlow
	}
	st := s.i
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return s.b[st : s.i-1], nil
		case c == '\\' || c < 0x20 || c >= 0x80:
			return nil, errSlow
		}
		s.i++
	}
	return nil, errSlow
}

// num returns the bytes of a number token.
func (s *scan) num() []byte {
	s.ws()
	st := s.i
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c >= '0' && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
			s.i++
			continue
		}
		break
	}
	return s.b[st:s.i]
}

func (s *scan) lit(word string) bool {
	s.ws()
	if len(s.b)-s.i >= len(word) && string(s.b[s.i:s.i+len(word)]) == word {
		s.i += len(word)
		return true
	}
	return false
}

// skip skips any value; strings may hold escapes here.
func (s *scan) skip(depth int) error {
	if depth > 64 {
		return errSlow
	}
	switch s.peek() {
	case '"':
		s.i++
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '\\':
				s.i += 2
				continue
			case '"':
				s.i++
				return nil
			}
			s.i++
		}
		return errSlow
	case '{', '[':
		open := s.b[s.i]
		close := byte('}')
		if open == '[' {
			close = ']'
		}
		s.i++
		if s.eat(close) {
			return nil
		}
		for {
			if open == '{' {
				if _, err := s.skipKey(); err != nil {
					return err
				}
			}
			if err := s.skip(depth + 1); err != nil {
				return err
			}
			if s.eat(close) {
				return nil
			}
			if !s.eat(',') {
				return errSlow
			}
		}
	case 't':
		if s.lit("true") {
			return nil
		}
	case 'f':
		if s.lit("false") {
			return nil
		}
	case 'n':
		if s.lit("null") {
			return nil
		}
	default:
		if len(s.num()) > 0 {
			return nil
		}
	}
	return errSlow
}

func (s *scan) skipKey() ([]byte, error) {
	k, err := s.str()
	if err != nil {
		return nil, err
	}
	if !s.eat(':') {
		return nil, errSlow
	}
	return k, nil
}

func (s *scan) int32s() ([]int32, error) {
	if s.lit("null") {
		return nil, nil
	}
	if !s.eat('[') {
		return nil, errSlow
	}
	out := make([]int32, 0, 64)
	if s.eat(']') {
		return out, nil
	}
	for {
		v, ok := atoi32(s.num())
		if !ok {
			return nil, errSlow
		}
		out = append(out, v)
		if s.eat(']') {
			return out, nil
		}
		if !s.eat(',') {
			return nil, errSlow
		}
	}
}

func (s *scan) float32s() ([]float32, error) {
	if s.lit("null") {
		return nil, nil
	}
	if !s.eat('[') {
		return nil, errSlow
	}
	out := make([]float32, 0, 64)
	if s.eat(']') {
		return out, nil
	}
	for {
		v, err := strconv.ParseFloat(string(s.num()), 32)
		if err != nil {
			return nil, errSlow
		}
		out = append(out, float32(v))
		if s.eat(']') {
			return out, nil
		}
		if !s.eat(',') {
			return nil, errSlow
		}
	}
}

func (s *scan) boolean() (bool, error) {
	switch {
	case s.lit("true"):
		return true, nil
	case s.lit("false"), s.lit("null"):
		return false, nil
	}
	return false, errSlow
}

func (s *scan) text() (string, error) {
	if s.lit("null") {
		return "", nil
	}
	b, err := s.str()
	return string(b), err
}

// fastCall fills c and reports success; on false the caller must fall back.
// Duplicate keys keep the last value, as encoding/json does; keys are
// matched exactly (encoding/json also matches case-insensitively — such
// input takes the slow path because an unknown key is only skipped when it
// cannot be a case variant of a wanted one).
func fastCall(b []byte, c *api.ModelCall) bool {
	s := &scan{b: b}
	if !s.eat('{') {
		return false
	}
	if !s.eat('}') {
		for {
			k, err := s.skipKey()
			if err != nil {
				return false
			}
			switch string(k) {
			case "call_id":
				c.CallID, err = s.text()
			case "api":
				c.API, err = s.text()
			case "model":
				c.Model, err = s.text()
			case "model_version":
				var v int64
				v, err = strconv.ParseInt(string(s.num()), 10, 64)
				c.ModelVersion = v
			case "prompt_ids":
				c.PromptIDs, err = s.int32s()
			case "response_ids":
				c.ResponseIDs, err = s.int32s()
			case "response_logprobs":
				c.ResponseLogprobs, err = s.float32s()
			case "no_token_ids":
				c.NoTokenIDs, err = s.boolean()
			case "continued":
				c.Continued, err = s.boolean()
			case "render_reason":
				c.RenderReason, err = s.text()
			case "finish_reason":
				c.FinishReason, err = s.text()
			default:
				if caseVariant(k) {
					return false
				}
				err = s.skip(0)
			}
			if err != nil {
				return false
			}
			if s.eat('}') {
				break
			}
			if !s.eat(',') {
				return false
			}
		}
	}
	s.ws()
	return s.i == len(s.b)
}

var wanted = []string{"call_id", "api", "model", "model_version", "prompt_ids", "response_ids",
	"response_logprobs", "no_token_ids", "continued", "render_reason", "finish_reason"}

// caseVariant reports whether k equals a wanted key ignoring ASCII case.
func caseVariant(k []byte) bool {
	for _, w := range wanted {
		if len(w) != len(k) {
			continue
		}
		eq := true
		for i := range k {
			a, b := k[i], w[i]
			if 'A' <= a && a <= 'Z' {
				a += 'a' - 'A'
			}
			if a != b {
				eq = false
				break
			}
		}
		if eq {
			return true
		}
	}
	return false
}

// atoi32 parses a JSON integer that fits int32 (no sign other than a
// leading '-', no leading zeros, no fraction or exponent).
func atoi32(b []byte) (int32, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 10 || (b[0] == '0' && len(b) > 1) {
		return 0, false
	}
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	if neg {
		v = -v
	}
	if v < -1<<31 || v > 1<<31-1 {
		return 0, false
	}
	return int32(v), true
}

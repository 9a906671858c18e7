package samples

import (
	"encoding/json"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/internal/fastjson"
)

// decodeCall decodes the fields of a "model_request" event that samples
// need, several times faster than encoding/json on id-heavy events: token
// arrays are parsed directly and the request/response bodies are skipped
// (validated, not decoded). Anything the fast path does not read exactly
// as encoding/json does falls back to encoding/json, so the result is the
// same as json.Unmarshal into api.ModelCall restricted to those fields.
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
		Agent: full.Agent, Status: full.Status,
	}, nil
}

// fastCall fills c and reports success; on false the caller decodes with
// encoding/json. fastjson accepts only what it reads exactly as
// encoding/json does (a repeated key or a case variant of a wanted one
// takes the slow path).
func fastCall(data []byte, c *api.ModelCall) bool {
	s := fastjson.New(data)
	if s.Null() {
		return false
	}
	ok := s.Fields(func(k int) bool {
		var ok bool
		switch k {
		case 0:
			return s.StringOrNull(&c.CallID)
		case 1:
			return s.StringOrNull(&c.API)
		case 2:
			return s.StringOrNull(&c.Model)
		case 3:
			if s.Null() {
				return true
			}
			c.ModelVersion, ok = s.Int(64)
		case 4:
			c.PromptIDs, ok = s.Int32s()
		case 5:
			c.ResponseIDs, ok = s.Int32s()
		case 6:
			c.ResponseLogprobs, ok = s.Float32s()
		case 7:
			return boolOrNull(s, &c.NoTokenIDs)
		case 8:
			return boolOrNull(s, &c.Continued)
		case 9:
			return s.StringOrNull(&c.RenderReason)
		case 10:
			return s.StringOrNull(&c.FinishReason)
		case 11:
			return s.StringOrNull(&c.Agent)
		default:
			return s.StringOrNull(&c.Status)
		}
		return ok
	}, "call_id", "api", "model", "model_version", "prompt_ids", "response_ids",
		"response_logprobs", "no_token_ids", "continued", "render_reason", "finish_reason", "agent", "status")
	return ok && s.End()
}

func boolOrNull(s *fastjson.Scanner, v *bool) bool {
	if s.Null() {
		return true
	}
	var ok bool
	*v, ok = s.Bool()
	return ok
}

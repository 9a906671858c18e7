// Package api holds agl's wire types: the JSON shapes of the /api routes, of
// the events harnesses and the gateway append, and a Go client for them.
package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"

	"github.com/aglrl/agl/store"
)

// API shapes a model call can arrive in.
const (
	ShapeChatCompletions = "chat.completions"
	ShapeCompletions     = "completions"
	ShapeResponses       = "responses"
	ShapeMessages        = "messages"         // Anthropic Messages
	ShapeGenerateContent = "generate_content" // Gemini API generateContent / streamGenerateContent
)

// Finish reasons of a ModelCall.
const (
	FinishStop      = "stop"       // the reply ended with a stop id
	FinishLength    = "length"     // max tokens or the context limit cut it off
	FinishToolCalls = "tool_calls" // the reply ended with a stop id after making tool calls
)

// ModelCall is the data of a "model_request" event: one call a harness made
// through the gateway, with the exact token ids the engine consumed and
// produced. It is the only input the samples package needs from a call.
type ModelCall struct {
	// CallID is unique within the attempt (e.g. the response id returned
	// to the harness); intermediate rewards may reference it.
	CallID string `json:"call_id"`
	// API is one of the Shape* constants.
	API string `json:"api"`
	// Model is the name the engine served; ModelVersion the weights version
	// that produced every response token of this call.
	Model        string `json:"model"`
	ModelVersion int64  `json:"model_version"`
	// Agent names the agent of a multi-agent harness that made the call
	// (path segment /r/{rollout}/{attempt}/agents/{agent}/, header
	// X-Agl-Agent, or the proxy's model-name mapping); empty for the
	// default agent. See ValidAgentName.
	Agent string `json:"agent,omitempty"`
	// PromptIDs are the exact ids given to the engine; ResponseIDs the exact
	// ids it generated; ResponseLogprobs[i] is log p(ResponseIDs[i]) under
	// the policy (temperature-1 log-softmax), as the trainer computes it.
	PromptIDs        []int32   `json:"prompt_ids,omitempty"`
	ResponseIDs      []int32   `json:"response_ids,omitempty"`
	ResponseLogprobs []float32 `json:"response_logprobs,omitempty"`
	// NoTokenIDs marks a call whose upstream returned no ids (a hosted
	// API): usable for SFT or prompt work, never for RL.
	NoTokenIDs bool `json:"no_token_ids,omitempty"`
	// FinishReason is FinishStop, FinishLength, or FinishToolCalls (a
	// stop whose reply made tool calls), whatever the API shape.
	FinishReason string `json:"finish_reason,omitempty"`
	// Continued is true when PromptIDs extend the previous call's
	// prompt+response ids of this attempt (token state kept); otherwise
	// RenderReason says why the prompt was rendered from scratch
	// ("first_call", "history_rewritten", "model_version_changed", …).
	Continued    bool   `json:"continued"`
	RenderReason string `json:"render_reason,omitempty"`
	// UpstreamRendered marks a call an upstream (vLLM in chat mode)
	// rendered and tokenized itself: PromptIDs are its re-tokenization of
	// the whole conversation, not agl's token state (see engine.upstream
	// mode: token).
	UpstreamRendered bool `json:"upstream_rendered,omitempty"`
	// Sampling holds the effective sampling parameters.
	Sampling json.RawMessage `json:"sampling,omitempty"`
	// Request is the body as received; Response the body as returned
	// (for streams, the assembled final object).
	Request  json.RawMessage `json:"request,omitempty"`
	Response json.RawMessage `json:"response,omitempty"`
	Usage    Usage           `json:"usage"`
	// LatencyMS is the gateway's wall time for the call; Retries counts
	// upstream retries.
	LatencyMS float64 `json:"latency_ms"`
	Retries   int     `json:"retries,omitempty"`
	Stream    bool    `json:"stream,omitempty"`
	// Ignored lists what the request asked for that the model did not get,
	// each as a request path with what was dropped or changed (e.g.
	// "thinking", "tools[8] (web_search)", "max_tokens (128000 clamped to
	// 12000)", "header anthropic-beta: …"): accepted, not honoured.
	Ignored []string `json:"ignored,omitempty"`
	// Status is CallError for a call the gateway refused or that failed
	// after its key was authenticated (empty for a call that was
	// answered): HTTPStatus and Error hold the status and the error body
	// the caller got (at most MaxCallErrorBytes); it has no ids, request
	// or response.
	// Training and sample building skip these records.
	Status     string `json:"status,omitempty"`
	HTTPStatus int    `json:"http_status,omitempty"`
	Error      string `json:"error,omitempty"`
}

// CallError is ModelCall.Status of a refused or failed call.
const CallError = "error"

// MaxCallErrorBytes bounds ModelCall.Error.
const MaxCallErrorBytes = 4 << 10

// MaxAgentNameLen bounds an agent name.
const MaxAgentNameLen = 64

// ValidAgentName reports why name cannot name an agent: agent names are 1
// to MaxAgentNameLen bytes of A-Z a-z 0-9 '-' '_' '.', not starting with
// '.' (they appear in URL paths, headers, config keys and file names).
func ValidAgentName(name string) error {
	if name == "" {
		return fmt.Errorf("agent name is empty")
	}
	if len(name) > MaxAgentNameLen {
		return fmt.Errorf("agent name of %d bytes exceeds %d", len(name), MaxAgentNameLen)
	}
	if name[0] == '.' {
		return fmt.Errorf("agent name %q starts with '.'", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("agent name %q: byte %d (%q) is not one of A-Z a-z 0-9 - _ .", name, i, c)
		}
	}
	return nil
}

// Usage counts tokens of one call.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// DefaultMaxStoredCallBytes is the default bound on what one model call
// (or one event posted on /al) may store (gateway.max_stored_call_bytes).
const DefaultMaxStoredCallBytes = 8 << 20

// DefaultMaxAbsReward is the default bound on |reward| at the door.
const DefaultMaxAbsReward = 1e6

// FieldError is an appended event refused at the door: Status is 403 for a
// type or field the caller may not write, 400 for a bad value; Field names
// it ("events[0].data.value").
type FieldError struct {
	Status  int
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// CheckEvents validates events before they are appended, the same way on
// every route: each names a type; a harness (a scoped attempt key) may
// append only harness types (reward, log, custom), never a gateway-owned
// one nor a reward carrying a source; every reward is a JSON number or a
// Reward object whose values are finite numbers with |v| <= maxAbs
// (DefaultMaxAbsReward when maxAbs <= 0).
func CheckEvents(evs []store.NewEvent, harness bool, maxAbs float64) *FieldError {
	if !(maxAbs > 0) { // NaN too
		maxAbs = DefaultMaxAbsReward
	}
	for i, e := range evs {
		field := "events[" + strconv.Itoa(i) + "]"
		switch {
		case e.Type == "":
			return &FieldError{http.StatusBadRequest, field + ".type", "event type is required"}
		case harness && store.GatewayOwned(e.Type):
			return &FieldError{http.StatusForbidden, field + ".type", e.Type + " events are recorded by the gateway, not posted by harnesses"}
		case harness && store.ControllerOwned(e.Type):
			return &FieldError{http.StatusForbidden, field + ".type", e.Type + " events are recorded by the controller, not posted by harnesses"}
		case e.Type == store.EventReward:
			if fe := checkReward(e.Data, harness, maxAbs); fe != nil {
				fe.Field = field + ".data" + fe.Field
				return fe
			}
		}
	}
	return nil
}

// checkReward validates reward event data; the FieldError's Field is the
// path below data ("" for data itself, ".value", …).
func checkReward(data json.RawMessage, harness bool, maxAbs float64) *FieldError {
	bad := func(field, format string, args ...any) *FieldError {
		return &FieldError{http.StatusBadRequest, field, fmt.Sprintf(format, args...)}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if len(bytes.TrimSpace(data)) == 0 {
		return bad("", "a reward is a number or an object with value or values, got nothing")
	}
	if err := dec.Decode(&v); err != nil {
		return bad("", "malformed JSON: %v", err)
	}
	if dec.More() {
		return bad("", "malformed JSON: more than one value")
	}
	number := func(field string, x any) *FieldError {
		n, ok := x.(json.Number)
		if !ok {
			return bad(field, "a reward value must be a number, got %s", jsonKind(x))
		}
		f, err := strconv.ParseFloat(string(n), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return bad(field, "reward %s is not a finite number", n)
		}
		if math.Abs(f) > maxAbs {
			return bad(field, "reward %s is out of range: |reward| must be at most %g", n, maxAbs)
		}
		return nil
	}
	switch d := v.(type) {
	case json.Number:
		return number("", d)
	case map[string]any:
		value, hasValue := d["value"]
		values, hasValues := d["values"]
		if hasValue {
			if fe := number(".value", value); fe != nil {
				return fe
			}
		}
		if hasValues {
			m, ok := values.(map[string]any)
			if !ok {
				return bad(".values", "values must be an object of numbers, got %s", jsonKind(values))
			}
			for _, k := range slices.Sorted(maps.Keys(m)) {
				if fe := number(".values."+k, m[k]); fe != nil {
					return fe
				}
			}
			if p, ok := d["primary"]; ok && !hasValue {
				ps, ok := p.(string)
				if !ok {
					return bad(".primary", "primary must be a string, got %s", jsonKind(p))
				}
				if _, ok := m[ps]; !ok && (ps != "" || len(m) != 1) {
					return bad(".primary", "primary %q is not among values", ps)
				}
			} else if !hasValue && len(m) == 0 {
				return bad(".values", "values is empty")
			} else if !hasValue && len(m) != 1 {
				return bad(".primary", "several values need a primary naming the one trained on")
			}
		}
		if !hasValue && !hasValues {
			return bad("", "a reward object needs value or values")
		}
		for _, k := range []string{"call_id", "source"} {
			if x, ok := d[k]; ok {
				if _, ok := x.(string); !ok {
					return bad("."+k, "%s must be a string, got %s", k, jsonKind(x))
				}
			}
		}
		if s, ok := d["source"]; ok && harness {
			return &FieldError{http.StatusForbidden, ".source", fmt.Sprintf("a reward's source (%q) is set by the controller, not by harnesses", s)}
		}
		return nil
	default:
		return bad("", "a reward is a number or an object with value or values, got %s", jsonKind(v))
	}
}

// jsonKind names the JSON type of a decoded value.
func jsonKind(x any) string {
	switch x.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", x)
}

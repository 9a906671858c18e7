package samples

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/store"
)

// ShapingConfig turns tool-call outcomes recorded in an attempt's
// conversation into intermediate rewards ("automatic intermediate
// rewarding"). A shaping reward s_k of call c_k is added to its per-call
// reward r_k (a harness's reward event for the call, 0 when none), so it
// counts exactly as one under every credit mode: per_call G_k = R + r_k +
// s_k; discounted with it in each r_k; last_call only the last call's;
// broadcast only with add_call_rewards (summed into R). Shaping is
// computed from the gateway's records of the calls, so it also applies
// when an evaluator's outcome silences the harness's per-call rewards.
type ShapingConfig struct {
	// ToolError is added to a call for each tool call it made whose result
	// a later call's request marks as an error: an Anthropic tool_result
	// with is_error: true; an OpenAI tool message (Chat Completions) or
	// function_call_output (Responses), which have no error flag, whose
	// text starts with "error" (any case, after leading space), e.g.
	// "Error: no such table". Each tool call counts once, however often
	// later requests repeat its result.
	ToolError float64 `yaml:"tool_error" json:"tool_error,omitempty"`
	// MalformedToolCall is added to a call for each tool-call block in its
	// reply that the gateway could not parse (a "<tool_call>" left in the
	// reply's text instead of a tool call).
	MalformedToolCall float64 `yaml:"malformed_tool_call" json:"malformed_tool_call,omitempty"`
}

// Enabled reports whether any weight is set.
func (c ShapingConfig) Enabled() bool { return c.ToolError != 0 || c.MalformedToolCall != 0 }

// Validate reports a weight that is not a finite number.
func (c ShapingConfig) Validate() error {
	for name, v := range map[string]float64{"tool_error": c.ToolError, "malformed_tool_call": c.MalformedToolCall} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("samples: intermediate_rewards.%s %v is not a finite number", name, v)
		}
	}
	return nil
}

// Shaping is one attempt's shaping: per call id, its reward and what it
// was for.
type Shaping struct {
	Rewards            map[string]float64
	ToolErrors         int
	MalformedToolCalls int
}

// shapeCall is what shaping reads of one model_request event.
type shapeCall struct {
	CallID   string          `json:"call_id"`
	API      string          `json:"api"`
	Request  json.RawMessage `json:"request"`
	Response json.RawMessage `json:"response"`
	Status   string          `json:"status"`
}

// Shape computes the shaping rewards of attempt attemptID's calls from
// its model_request events (any order; other events ignored). Events or
// bodies that do not parse add nothing.
func Shape(cfg ShapingConfig, events []store.Event, attemptID string) Shaping {
	out := Shaping{Rewards: map[string]float64{}}
	if !cfg.Enabled() {
		return out
	}
	evs := make([]store.Event, 0, len(events))
	for _, e := range events {
		if e.Type == store.EventModelRequest && e.AttemptID == attemptID {
			evs = append(evs, e)
		}
	}
	slices.SortStableFunc(evs, func(a, b store.Event) int { return cmpInt64(a.Seq, b.Seq) })
	madeBy := map[string]string{} // tool call id → the call id whose reply made it
	counted := map[string]bool{}  // tool call ids whose error result was counted
	for _, e := range evs {
		var c shapeCall
		if json.Unmarshal(e.Data, &c) != nil || c.CallID == "" || c.Status == api.CallError {
			continue
		}
		for _, id := range toolErrors(c.API, c.Request) {
			by, ok := madeBy[id]
			if !ok || counted[id] {
				continue
			}
			counted[id] = true
			out.Rewards[by] += cfg.ToolError
			out.ToolErrors++
		}
		ids, text := replyTools(c.API, c.Response)
		for _, id := range ids {
			madeBy[id] = c.CallID
		}
		if n := strings.Count(text, chat.TokToolCall); n > 0 {
			out.Rewards[c.CallID] += float64(n) * cfg.MalformedToolCall
			out.MalformedToolCalls += n
		}
	}
	for id, v := range out.Rewards {
		if v == 0 {
			delete(out.Rewards, id)
		}
	}
	return out
}

// addShaping adds an attempt's shaping to its resolved reward (and to the
// outcome when add_call_rewards sums per-call rewards into it).
func addShaping(cfg RewardConfig, rw *RolloutReward, sh Shaping) {
	if len(sh.Rewards) == 0 {
		return
	}
	if rw.CallRewards == nil {
		rw.CallRewards = map[string]float64{}
	}
	for _, id := range slices.Sorted(maps.Keys(sh.Rewards)) {
		rw.CallRewards[id] += sh.Rewards[id]
		if cfg.AddCallRewards {
			rw.Value += sh.Rewards[id]
		}
	}
}

// text is a content that is a string or a list of text parts.
type text string

func (t *text) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*t = text(s)
		return nil
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(b, &parts); err != nil {
		return nil // another shape: no text
	}
	var sb strings.Builder
	for _, p := range parts {
		sb.WriteString(p.Text)
	}
	*t = text(sb.String())
	return nil
}

func (t text) isError() bool {
	s := strings.TrimSpace(string(t))
	return len(s) >= 5 && strings.EqualFold(s[:5], "error")
}

// toolErrors lists the tool call ids whose results a request marks as
// errors.
func toolErrors(shape string, req json.RawMessage) []string {
	var ids []string
	switch shape {
	case api.ShapeChatCompletions:
		var r struct {
			Messages []struct {
				Role       string `json:"role"`
				Content    text   `json:"content"`
				ToolCallID string `json:"tool_call_id"`
			} `json:"messages"`
		}
		json.Unmarshal(req, &r)
		for _, m := range r.Messages {
			if m.Role == "tool" && m.ToolCallID != "" && m.Content.isError() {
				ids = append(ids, m.ToolCallID)
			}
		}
	case api.ShapeResponses:
		var r struct {
			Input json.RawMessage `json:"input"`
		}
		json.Unmarshal(req, &r)
		var items []struct {
			Type   string `json:"type"`
			CallID string `json:"call_id"`
			Output text   `json:"output"`
		}
		json.Unmarshal(r.Input, &items) // a string input has no items
		for _, it := range items {
			if it.Type == "function_call_output" && it.CallID != "" && it.Output.isError() {
				ids = append(ids, it.CallID)
			}
		}
	case api.ShapeMessages:
		var r struct {
			Messages []struct {
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		json.Unmarshal(req, &r)
		for _, m := range r.Messages {
			var blocks []struct {
				Type      string `json:"type"`
				ToolUseID string `json:"tool_use_id"`
				IsError   bool   `json:"is_error"`
			}
			json.Unmarshal(m.Content, &blocks) // a string content has no blocks
			for _, b := range blocks {
				if b.Type == "tool_result" && b.IsError && b.ToolUseID != "" {
					ids = append(ids, b.ToolUseID)
				}
			}
		}
	case api.ShapeGenerateContent:
		// A functionResponse is an error when its response has an
		// "error" field (Gemini CLI's failed tools) or its output text
		// reads as one.
		var r struct {
			Contents []struct {
				Parts []struct {
					FunctionResponse *struct {
						ID       string `json:"id"`
						Response struct {
							Error  json.RawMessage `json:"error"`
							Output text            `json:"output"`
						} `json:"response"`
					} `json:"functionResponse"`
				} `json:"parts"`
			} `json:"contents"`
		}
		json.Unmarshal(req, &r)
		for _, c := range r.Contents {
			for _, p := range c.Parts {
				fr := p.FunctionResponse
				if fr == nil || fr.ID == "" {
					continue
				}
				if e := fr.Response.Error; len(e) > 0 && string(e) != "null" || fr.Response.Output.isError() {
					ids = append(ids, fr.ID)
				}
			}
		}
	}
	return ids
}

// replyTools returns the tool call ids a response made and its text.
func replyTools(shape string, resp json.RawMessage) (ids []string, txt string) {
	var sb strings.Builder
	switch shape {
	case api.ShapeChatCompletions:
		var r struct {
			Choices []struct {
				Message struct {
					Content   text `json:"content"`
					ToolCalls []struct {
						ID string `json:"id"`
					} `json:"tool_calls"`
				} `json:"message"`
			} `json:"choices"`
		}
		json.Unmarshal(resp, &r)
		for _, c := range r.Choices {
			sb.WriteString(string(c.Message.Content))
			for _, tc := range c.Message.ToolCalls {
				ids = append(ids, tc.ID)
			}
		}
	case api.ShapeResponses:
		var r struct {
			Output []struct {
				Type    string `json:"type"`
				CallID  string `json:"call_id"`
				Content text   `json:"content"`
			} `json:"output"`
		}
		json.Unmarshal(resp, &r)
		for _, o := range r.Output {
			switch o.Type {
			case "function_call":
				ids = append(ids, o.CallID)
			case "message":
				sb.WriteString(string(o.Content))
			}
		}
	case api.ShapeMessages:
		var r struct {
			Content []struct {
				Type string `json:"type"`
				ID   string `json:"id"`
				Text string `json:"text"`
			} `json:"content"`
		}
		json.Unmarshal(resp, &r)
		for _, b := range r.Content {
			switch b.Type {
			case "tool_use":
				ids = append(ids, b.ID)
			case "text":
				sb.WriteString(b.Text)
			}
		}
	case api.ShapeGenerateContent:
		var r struct {
			Candidates []struct {
				Content struct {
					Parts []struct {
						Text         string `json:"text"`
						Thought      bool   `json:"thought"`
						FunctionCall *struct {
							ID string `json:"id"`
						} `json:"functionCall"`
					} `json:"parts"`
				} `json:"content"`
			} `json:"candidates"`
		}
		json.Unmarshal(resp, &r)
		for _, c := range r.Candidates {
			for _, p := range c.Content.Parts {
				switch {
				case p.FunctionCall != nil:
					ids = append(ids, p.FunctionCall.ID)
				case !p.Thought:
					sb.WriteString(p.Text)
				}
			}
		}
	case api.ShapeCompletions:
		var r struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		json.Unmarshal(resp, &r)
		for _, c := range r.Choices {
			sb.WriteString(c.Text)
		}
	}
	return ids, sb.String()
}

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
	"github.com/aglrl/agl/llmapi"
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
	// with is_error: true; a Gemini functionResponse whose response has an
	// "error" member; in the other shapes (and Gemini), a tool result
	// whose text starts with "error" (any case, after leading space), e.g.
	// "Error: no such table": an OpenAI tool message (Chat Completions),
	// function_call_output or custom_tool_call_output (Responses), which
	// have no error flag. Each tool call counts once, however often later
	// requests repeat its result.
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
		pc, _ := llmapi.ParseCall(c.API, c.Request, c.Response) // what does not parse adds nothing
		for _, id := range toolErrors(c.API, pc.Messages) {
			by, ok := madeBy[id]
			if !ok || counted[id] {
				continue
			}
			counted[id] = true
			out.Rewards[by] += cfg.ToolError
			out.ToolErrors++
		}
		if pc.Reply == nil {
			continue
		}
		for _, tc := range pc.Reply.ToolCalls {
			madeBy[tc.ID] = c.CallID
		}
		if n := strings.Count(pc.Reply.Text, chat.TokToolCall); n > 0 {
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

// looksFailed reports whether a tool result's text reads as an error: it
// starts with "error" (any case, after leading space).
func looksFailed(text string) bool {
	s := strings.TrimSpace(text)
	return len(s) >= 5 && strings.EqualFold(s[:5], "error")
}

// toolErrors lists the tool call ids whose results msgs (a request of
// the given API shape) mark as errors: the harness's own mark where the
// shape has one (Anthropic is_error; Gemini's "error" member, or else
// output text that reads as an error); in the OpenAI shapes, which have
// none, text that reads as an error.
func toolErrors(shape string, msgs []llmapi.Message) []string {
	var ids []string
	for _, m := range msgs {
		if m.Role != "tool" || m.ToolCallID == "" {
			continue
		}
		if m.IsError || shape != api.ShapeMessages && looksFailed(m.Text) {
			ids = append(ids, m.ToolCallID)
		}
	}
	return ids
}

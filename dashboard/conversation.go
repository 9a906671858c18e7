package dashboard

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/llmapi"
	"github.com/aglrl/agl/store"
)

// Call is one model call as the harness saw it.
type Call struct {
	Seq          int64     `json:"seq"`
	Time         time.Time `json:"time"`
	CallID       string    `json:"call_id"`
	API          string    `json:"api"`
	Model        string    `json:"model"`
	ModelVersion int64     `json:"model_version"`
	// Agent is the agent that made the call ("" the default agent).
	Agent            string  `json:"agent,omitempty"`
	Stream           bool    `json:"stream,omitempty"`
	LatencyMS        float64 `json:"latency_ms"`
	PromptTokens     int     `json:"prompt_tokens"`
	CompletionTokens int     `json:"completion_tokens"`
	FinishReason     string  `json:"finish_reason,omitempty"`
	Continued        bool    `json:"continued"`
	RenderReason     string  `json:"render_reason,omitempty"`
	NoTokenIDs       bool    `json:"no_token_ids,omitempty"`
	// Tools names the tools the request declared.
	Tools []string `json:"tools,omitempty"`
	// Context counts the messages of the request already shown with
	// earlier calls; New holds the rest (tool results, new user turns).
	// When the request does not extend the previous call's conversation
	// (history edited or cut), Rewritten is set and New holds all of it.
	Context   int              `json:"context"`
	New       []llmapi.Message `json:"new"`
	Rewritten bool             `json:"rewritten,omitempty"`
	// Reply is what the model answered (a stream's assembled reply).
	Reply *llmapi.Message `json:"reply,omitempty"`
	// Error says why the request or response could not be read.
	Error string `json:"error,omitempty"`
	// HTTPStatus and Refusal are set for a call the gateway refused or
	// that failed (api.CallError): the status and error body the harness
	// got. Such a call has no messages and leaves the conversation as it
	// was.
	HTTPStatus int    `json:"http_status,omitempty"`
	Refusal    string `json:"refusal,omitempty"`
}

// callEvent is the part of an api.ModelCall the conversation shows: the
// token arrays are skipped, not decoded.
type callEvent struct {
	CallID       string          `json:"call_id"`
	API          string          `json:"api"`
	Model        string          `json:"model"`
	ModelVersion int64           `json:"model_version"`
	Agent        string          `json:"agent"`
	NoTokenIDs   bool            `json:"no_token_ids"`
	FinishReason string          `json:"finish_reason"`
	Continued    bool            `json:"continued"`
	RenderReason string          `json:"render_reason"`
	Request      json.RawMessage `json:"request"`
	Response     json.RawMessage `json:"response"`
	Usage        api.Usage       `json:"usage"`
	LatencyMS    float64         `json:"latency_ms"`
	Stream       bool            `json:"stream"`
	Status       string          `json:"status"`
	HTTPStatus   int             `json:"http_status"`
	Error        string          `json:"error"`
}

// Conversation turns an attempt's model_request events (in sequence order)
// into the conversation the harness had: each call with the messages it
// added and the model's reply. Each agent's calls continue that agent's
// own conversation.
func Conversation(events []store.Event) []Call {
	out := make([]Call, 0, len(events))
	prevOf := map[string][]llmapi.Message{} // per agent: the previous call's request + reply
	names := map[string]string{}
	for _, e := range events {
		var mc callEvent
		c := Call{Seq: e.Seq, Time: e.Time}
		if err := json.Unmarshal(e.Data, &mc); err != nil {
			c.Error = "event data is not a model call: " + err.Error()
			out = append(out, c)
			continue
		}
		c.CallID, c.API, c.Model, c.ModelVersion, c.Agent = mc.CallID, mc.API, mc.Model, mc.ModelVersion, mc.Agent
		prev := prevOf[mc.Agent]
		c.Stream, c.LatencyMS, c.FinishReason = mc.Stream, mc.LatencyMS, mc.FinishReason
		c.PromptTokens, c.CompletionTokens = mc.Usage.PromptTokens, mc.Usage.CompletionTokens
		c.Continued, c.RenderReason, c.NoTokenIDs = mc.Continued, mc.RenderReason, mc.NoTokenIDs
		if mc.Status == api.CallError {
			c.HTTPStatus, c.Refusal, c.New = mc.HTTPStatus, mc.Error, []llmapi.Message{}
			out = append(out, c)
			continue
		}
		pc, err := llmapi.ParseCall(mc.API, mc.Request, mc.Response)
		if err != nil {
			c.Error = err.Error()
		}
		msgs, reply := pc.Messages, pc.Reply
		c.Tools = pc.Tools
		for _, m := range msgs {
			for _, tc := range m.ToolCalls {
				if tc.ID != "" {
					names[tc.ID] = tc.Name
				}
			}
		}
		if reply != nil {
			for _, tc := range reply.ToolCalls {
				if tc.ID != "" {
					names[tc.ID] = tc.Name
				}
			}
		}
		for i := range msgs {
			if msgs[i].Role == "tool" && msgs[i].Name == "" {
				msgs[i].Name = names[msgs[i].ToolCallID]
			}
		}
		if extends(msgs, prev) {
			c.Context, c.New = len(prev), msgs[len(prev):]
		} else {
			c.New, c.Rewritten = msgs, len(prev) > 0
		}
		if c.New == nil {
			c.New = []llmapi.Message{}
		}
		c.Reply = reply
		prevOf[mc.Agent] = append(msgs[:len(msgs):len(msgs)], derefs(reply)...)
		out = append(out, c)
	}
	return out
}

func derefs(m *llmapi.Message) []llmapi.Message {
	if m == nil {
		return nil
	}
	return []llmapi.Message{*m}
}

// extends reports whether msgs starts with prev (compared by role, text and
// tool calls' names and arguments: ids and whitespace may be re-rendered).
func extends(msgs, prev []llmapi.Message) bool {
	if len(prev) > len(msgs) {
		return false
	}
	for i, p := range prev {
		m := msgs[i]
		if m.Role != p.Role || strings.TrimSpace(m.Text) != strings.TrimSpace(p.Text) || len(m.ToolCalls) != len(p.ToolCalls) {
			return false
		}
		for k := range p.ToolCalls {
			if m.ToolCalls[k].Name != p.ToolCalls[k].Name || llmapi.CompactJSON(json.RawMessage(m.ToolCalls[k].Arguments)) != llmapi.CompactJSON(json.RawMessage(p.ToolCalls[k].Arguments)) {
				return false
			}
		}
	}
	return true
}

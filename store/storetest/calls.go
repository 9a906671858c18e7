package storetest

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/aglrl/agl/api"
)

// Conversation makes the model_request events of one long-horizon rollout
// as the gateway records them today (api.ModelCall as encoding/json
// writes it, which the gateway's encoder is fuzzed against): calls
// chat-completions calls, each adding a tool result of toolBytes bytes to
// the history it resends and continuing the previous call's token state
// (prompt ids = previous prompt + response ids + the new ones). Every
// third call of agents other than the first renders afresh (a history
// rewrite: new ids). It returns the events' data and the final
// conversation's JSON.
func Conversation(agents []string, calls, toolBytes int) (events [][]byte, final []byte) {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	hist := map[string][]msg{}
	prompt := map[string][]int32{}
	var id int32 = 7
	next := func(n int) []int32 {
		v := make([]int32, n)
		for i := range v {
			id = (id*1103515245 + 12345) & 0x1ffff
			v[i] = id
		}
		return v
	}
	for k := 0; k < calls; k++ {
		agent := agents[k%len(agents)]
		h := hist[agent]
		if len(h) == 0 {
			h = []msg{{"system", "You are a coding agent."}, {"user", "Fix the failing test."}}
		}
		tool := fmt.Sprintf("call %d output: %s", k, strings.Repeat(fmt.Sprintf("line %d of the tool's output\n", k), toolBytes/28+1))[:toolBytes]
		h = append(h, msg{"tool", tool})
		req, _ := json.Marshal(map[string]any{"model": "m", "messages": h, "temperature": 1, "tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "sh"}}}})
		p := prompt[agent]
		reason, continued := "", len(p) > 0
		if agent != agents[0] && k%3 == 0 {
			p, continued, reason = nil, false, "history_rewritten"
		}
		p = append(p, next(toolBytes/4)...)
		resp := next(40)
		lps := make([]float32, len(resp))
		for i := range lps {
			lps[i] = -float32(i%7) / 8
		}
		answer := fmt.Sprintf("I will run the tests again (step %d).", k)
		body, _ := json.Marshal(map[string]any{"id": fmt.Sprint("chatcmpl-", k), "object": "chat.completion",
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": answer}, "finish_reason": "stop"}}})
		mc := api.ModelCall{CallID: fmt.Sprint("chatcmpl-", k), API: api.ShapeChatCompletions, Model: "m", ModelVersion: 2, Agent: agent,
			PromptIDs: p, ResponseIDs: resp, ResponseLogprobs: lps, FinishReason: "stop", Continued: continued, RenderReason: reason,
			Sampling: json.RawMessage(`{"temperature":1,"max_tokens":512}`), Request: req, Response: body,
			Usage: api.Usage{PromptTokens: len(p), CompletionTokens: len(resp)}, LatencyMS: 12.5 + float64(k)}
		ev, _ := json.Marshal(mc)
		events = append(events, ev)
		hist[agent] = append(h, msg{"assistant", answer})
		prompt[agent] = append(p, resp...)
		final = req
	}
	return events, final
}

package samples

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

// shapeEvents makes one attempt's model_request events from (api,
// request, response) triples; call k is "c{k}".
func shapeEvents(t *testing.T, att string, calls [][3]string) []store.Event {
	var evs []store.Event
	for k, c := range calls {
		b, err := json.Marshal(api.ModelCall{CallID: "c" + string(rune('0'+k)), API: c[0], Request: json.RawMessage(c[1]), Response: json.RawMessage(c[2])})
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, store.Event{Seq: int64(k + 1), AttemptID: att, Type: store.EventModelRequest, Data: b})
	}
	return evs
}

// TestShape: hand-computed shaping rewards (tool_error −0.1,
// malformed_tool_call −0.2) per API shape.
func TestShape(t *testing.T) {
	cfg := ShapingConfig{ToolError: -0.1, MalformedToolCall: -0.2}
	const chatReq0 = `{"messages":[{"role":"user","content":"q"}]}`
	tests := []struct {
		name  string
		calls [][3]string
		want  map[string]float64
		errs  int
		malf  int
	}{
		{"chat: an error result charges the call that made the tool call, once", [][3]string{
			{api.ShapeChatCompletions, chatReq0, `{"choices":[{"message":{"content":null,"tool_calls":[{"id":"t1"},{"id":"t2"}]}}]}`},
			{api.ShapeChatCompletions, `{"messages":[{"role":"tool","tool_call_id":"t1","content":"  Error: no such table"},{"role":"tool","tool_call_id":"t2","content":"3 rows"}]}`,
				`{"choices":[{"message":{"content":"<tool_call>\n{\"name\": bad\n</tool_call>"}}]}`},
			{api.ShapeChatCompletions, `{"messages":[{"role":"tool","tool_call_id":"t1","content":[{"type":"text","text":"error: no such table"}]},{"role":"tool","tool_call_id":"zz","content":"Error: a tool call no recorded call made"}]}`,
				`{"choices":[{"message":{"content":"done"}}]}`},
		}, map[string]float64{"c0": -0.1, "c1": -0.2}, 1, 1},
		{"anthropic: is_error, not the text", [][3]string{
			{api.ShapeMessages, `{"messages":[{"role":"user","content":"q"}]}`, `{"content":[{"type":"tool_use","id":"toolu_1"},{"type":"tool_use","id":"toolu_2"}]}`},
			{api.ShapeMessages, `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","is_error":true,"content":"boom"},{"type":"tool_result","tool_use_id":"toolu_2","content":"Error-looking text"}]}]}`,
				`{"content":[{"type":"tool_use","id":"toolu_3"}]}`},
			{api.ShapeMessages, `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","is_error":true}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_3","is_error":true}]}]}`,
				`{"content":[{"type":"text","text":"ok"}]}`},
		}, map[string]float64{"c0": -0.1, "c1": -0.1}, 2, 0},
		{"responses: function_call_output text, two malformed blocks", [][3]string{
			{api.ShapeResponses, `{"input":"q"}`, `{"output":[{"type":"function_call","call_id":"fc_1"},{"type":"message","content":[{"type":"output_text","text":"<tool_call>x</tool_call> <tool_call>y"}]}]}`},
			{api.ShapeResponses, `{"input":[{"type":"function_call_output","call_id":"fc_1","output":"ERROR no such file"}]}`, `{"output":[]}`},
		}, map[string]float64{"c0": -0.1 - 0.4}, 1, 2},
		{"gemini: an error field or error output, calls by id", [][3]string{
			{api.ShapeGenerateContent, `{"contents":[{"role":"user","parts":[{"text":"q"}]}]}`,
				`{"candidates":[{"content":{"role":"model","parts":[{"text":"hm","thought":true},{"functionCall":{"id":"call_1","name":"f"}},{"functionCall":{"id":"call_2","name":"f"}}]}}]}`},
			{api.ShapeGenerateContent, `{"contents":[{"role":"user","parts":[{"functionResponse":{"id":"call_1","name":"f","response":{"error":"boom"}}},{"functionResponse":{"id":"call_2","name":"f","response":{"output":"fine"}}}]}]}`,
				`{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"id":"call_3","name":"f"}},{"text":"<tool_call>{"}]}}]}`},
			{api.ShapeGenerateContent, `{"contents":[{"role":"user","parts":[{"functionResponse":{"id":"call_3","name":"f","response":{"output":"Error: no such file"}}}]}]}`,
				`{"candidates":[{"content":{"role":"model","parts":[{"text":"ok"}]}}]}`},
		}, map[string]float64{"c0": -0.1, "c1": -0.1 - 0.2}, 2, 1},
		{"prefix rule; a body of another shape adds nothing", [][3]string{
			{api.ShapeChatCompletions, chatReq0, `{"choices":[{"message":{"tool_calls":[{"id":"t1"}]}}]}`},
			{api.ShapeChatCompletions, `{"messages":[{"role":"tool","tool_call_id":"t1","content":"errors: 0"}]}`, `{"choices":"x"}`},
		}, map[string]float64{"c0": -0.1}, 1, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			evs := shapeEvents(t, "a1", tc.calls)
			// Another attempt's events are ignored.
			evs = append(evs, shapeEvents(t, "a0", tc.calls)...)
			got := Shape(cfg, evs, "a1")
			if len(got.Rewards) != len(tc.want) || got.ToolErrors != tc.errs || got.MalformedToolCalls != tc.malf {
				t.Fatalf("Shape = %+v, want rewards %v, %d tool errors, %d malformed", got, tc.want, tc.errs, tc.malf)
			}
			for id, v := range tc.want {
				if d := got.Rewards[id] - v; d > 1e-12 || d < -1e-12 {
					t.Errorf("call %s: %v, want %v", id, got.Rewards[id], v)
				}
			}
		})
	}
	if got := Shape(ShapingConfig{}, shapeEvents(t, "a1", tests[0].calls), "a1"); len(got.Rewards) != 0 {
		t.Errorf("zero weights shaped %v", got.Rewards)
	}
}

// TestShapingIsPerCallReward: under each credit mode that uses per-call
// rewards, shaping gives exactly the advantages that per-call reward
// events of the same values give, added to the outcome (never replacing
// it); broadcast credit without add_call_rewards refuses it.
func TestShapingIsPerCallReward(t *testing.T) {
	shaping := ShapingConfig{ToolError: -0.1, MalformedToolCall: -0.2}
	// Rollout a: call a0 makes tool call t1, whose result a1's request
	// marks as an error; a1's reply holds a malformed tool call. Shaping:
	// a0 −0.1, a1 −0.2. Rollout b: no errors.
	rs := []creditRollout{{id: "a", agents: []string{"w", "w"}, outcome: 1}, {id: "b", agents: []string{"w", "w"}, outcome: 0.5}}
	bodies := map[string][2]string{
		"a0": {`{"messages":[]}`, `{"choices":[{"message":{"tool_calls":[{"id":"t1"}]}}]}`},
		"a1": {`{"messages":[{"role":"tool","tool_call_id":"t1","content":"Error: boom"}]}`, `{"choices":[{"message":{"content":"<tool_call>{"}}]}`},
		"b0": {`{"messages":[]}`, `{"choices":[{"message":{"tool_calls":[{"id":"u1"}]}}]}`},
		"b1": {`{"messages":[{"role":"tool","tool_call_id":"u1","content":"ok"}]}`, `{"choices":[{"message":{"content":"fine"}}]}`},
	}
	ros, evs := creditStep(t, rs)
	for id, list := range evs {
		for i, e := range list {
			if e.Type != store.EventModelRequest {
				continue
			}
			var mc api.ModelCall
			json.Unmarshal(e.Data, &mc)
			mc.API, mc.Request, mc.Response = api.ShapeChatCompletions, json.RawMessage(bodies[mc.CallID][0]), json.RawMessage(bodies[mc.CallID][1])
			list[i].Data, _ = json.Marshal(mc)
		}
		evs[id] = list
	}
	rs[0].callRews = map[int]float64{0: -0.1, 1: -0.2}
	refRos, refEvs := creditStep(t, rs)
	for _, mode := range []Credit{CreditPerCall, CreditDiscounted, CreditLastCall} {
		t.Run(string(mode), func(t *testing.T) {
			cfg := Config{Credit: CreditConfig{Mode: mode, Gamma: 0.5}, Aggregation: DefaultAggregation}
			want, err := FromRollouts(refRos, refEvs, cfg)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Shaping = shaping
			if err := cfg.ValidateNames(); err != nil {
				t.Fatal(err)
			}
			got, err := FromRollouts(ros, evs, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got.Stats.ToolErrors != 1 || got.Stats.MalformedToolCalls != 1 || len(got.Samples) != len(want.Samples) || len(got.Samples) == 0 {
				t.Fatalf("stats %+v, %d samples, want %d", got.Stats, len(got.Samples), len(want.Samples))
			}
			for i := range got.Samples {
				g, w := got.Samples[i], want.Samples[i]
				if !reflect.DeepEqual(g.TokenAdvantages(), w.TokenAdvantages()) || !reflect.DeepEqual(g.CallRewards, w.CallRewards) || g.Reward != w.Reward {
					t.Errorf("sample %d: advantages %v rewards %v (R %v), per-call reward events give %v %v (R %v)", i,
						g.TokenAdvantages(), g.CallRewards, g.Reward, w.TokenAdvantages(), w.CallRewards, w.Reward)
				}
			}
		})
	}
	// per_call by hand: G = R + r + s: a0 0.9, a1 0.8, b0 0.5, b1 0.5.
	res, err := FromRollouts(ros, evs, Config{Credit: CreditConfig{Mode: CreditPerCall}, Shaping: shaping, Advantage: AdvantageConfig{Estimator: DrGRPO}})
	if err != nil {
		t.Fatal(err)
	}
	// Dr. GRPO: A = G − mean(G) = G − 0.675.
	want := map[string][]float64{"a": {0.225, 0.125}, "b": {-0.175, -0.175}}
	for _, s := range res.Samples {
		for k, a := range s.CallAdvantages {
			if d := a - want[s.RolloutID][k]; d > 1e-9 || d < -1e-9 {
				t.Errorf("%s call %d: advantage %v, want %v", s.RolloutID, k, a, want[s.RolloutID][k])
			}
		}
	}
	err = Config{Shaping: shaping}.ValidateNames()
	if err == nil || !strings.Contains(err.Error(), "broadcast credit ignores them") {
		t.Errorf("broadcast with shaping: %v", err)
	}
	if err := (Config{Shaping: shaping, Reward: RewardConfig{AddCallRewards: true}}).ValidateNames(); err != nil {
		t.Errorf("broadcast with add_call_rewards and shaping: %v", err)
	}
}

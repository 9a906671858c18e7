package store

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestRewardSummaryRank(t *testing.T) {
	cases := []struct {
		name        string
		newestFirst []string
		want        float64
		ok          bool
	}{
		{"newest harness reward", []string{`1`, `{"value":0}`}, 1, true},
		{"evaluator outranks a later harness reward", []string{`{"value":1}`, `{"value":0,"source":"evaluator"}`, `{"value":1}`}, 0, true},
		{"reward file outranks a later event", []string{`{"value":1}`, `{"value":0.5,"source":"reward_file"}`}, 0.5, true},
		{"evaluator outranks the reward file", []string{`{"value":0.5,"source":"reward_file"}`, `{"value":0,"source":"evaluator"}`}, 0, true},
		{"newest evaluator reward", []string{`{"value":0.25,"source":"evaluator"}`, `{"value":0,"source":"evaluator"}`}, 0.25, true},
		{"per-call rewards are not final", []string{`{"value":1,"call_id":"c"}`}, 0, false},
	}
	for _, tc := range cases {
		var ds []json.RawMessage
		for _, d := range slices.Backward(tc.newestFirst) {
			ds = append(ds, json.RawMessage(d))
		}
		v, _, ok := RewardSummary(ds)
		if v != tc.want || ok != tc.ok {
			t.Errorf("%s: %v %v, want %v %v", tc.name, v, ok, tc.want, tc.ok)
		}
	}
}

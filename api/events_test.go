package api

import (
	"encoding/json"
	"testing"

	"github.com/aglrl/agl/store"
)

func TestCheckEvents(t *testing.T) {
	ev := func(typ, data string) store.NewEvent { return store.NewEvent{Type: typ, Data: json.RawMessage(data)} }
	cases := []struct {
		name    string
		evs     []store.NewEvent
		harness bool
		status  int // 0: accepted
		field   string
	}{
		{"reward number", []store.NewEvent{ev("reward", "0.5")}, true, 0, ""},
		{"reward object", []store.NewEvent{ev("reward", `{"value":-1e6,"call_id":"c"}`)}, true, 0, ""},
		{"reward values", []store.NewEvent{ev("reward", `{"values":{"a":1,"b":2},"primary":"b","note":"x"}`)}, true, 0, ""},
		{"one value, no primary", []store.NewEvent{ev("reward", `{"values":{"a":1}}`)}, true, 0, ""},
		{"log and custom", []store.NewEvent{ev("log", `"x"`), ev("my.metric", "3")}, true, 0, ""},
		{"admin writes model_request", []store.NewEvent{ev("model_request", "{}")}, false, 0, ""},
		{"controller stamps a source", []store.NewEvent{ev("reward", `{"value":0,"source":"evaluator"}`)}, false, 0, ""},
		{"no type", []store.NewEvent{ev("", "1")}, true, 400, "events[0].type"},
		{"model_request", []store.NewEvent{ev("log", "1"), ev("model_request", "{}")}, true, 403, "events[1].type"},
		{"span", []store.NewEvent{ev("span", "{}")}, true, 403, "events[0].type"},
		{"tests from a harness", []store.NewEvent{ev("tests", `{"reward":1,"resolved":true}`)}, true, 403, "events[0].type"},
		{"sandbox from a harness", []store.NewEvent{ev("log", "1"), ev("sandbox", `{}`)}, true, 403, "events[1].type"},
		{"controller writes tests and sandbox", []store.NewEvent{ev("tests", `{"reward":1}`), ev("sandbox", `{}`)}, false, 0, ""},
		{"harness source", []store.NewEvent{ev("reward", `{"value":1,"source":"evaluator"}`)}, true, 403, "events[0].data.source"},
		{"1.7e308", []store.NewEvent{ev("reward", `{"value":1.7e308}`)}, true, 400, "events[0].data.value"},
		{"1.7e308 from admin too", []store.NewEvent{ev("reward", `1.7e308`)}, false, 400, "events[0].data"},
		{"1e999", []store.NewEvent{ev("reward", `1e999`)}, false, 400, "events[0].data"},
		{"bound", []store.NewEvent{ev("reward", `{"values":{"a":1,"b":-1000000.5},"primary":"a"}`)}, true, 400, "events[0].data.values.b"},
		{"boolean", []store.NewEvent{ev("reward", `{"value":true}`)}, true, 400, "events[0].data.value"},
		{"string", []store.NewEvent{ev("reward", `{"value":"1"}`)}, true, 400, "events[0].data.value"},
		{"null value", []store.NewEvent{ev("reward", `{"value":null}`)}, true, 400, "events[0].data.value"},
		{"null", []store.NewEvent{ev("reward", `null`)}, true, 400, "events[0].data"},
		{"no data", []store.NewEvent{ev("reward", ``)}, true, 400, "events[0].data"},
		{"bare boolean", []store.NewEvent{ev("reward", `true`)}, true, 400, "events[0].data"},
		{"empty object", []store.NewEvent{ev("reward", `{}`)}, true, 400, "events[0].data"},
		{"values not object", []store.NewEvent{ev("reward", `{"values":[1]}`)}, true, 400, "events[0].data.values"},
		{"primary missing", []store.NewEvent{ev("reward", `{"values":{"a":1,"b":2}}`)}, true, 400, "events[0].data.primary"},
		{"primary unknown", []store.NewEvent{ev("reward", `{"values":{"a":1},"primary":"z"}`)}, true, 400, "events[0].data.primary"},
		{"call_id not string", []store.NewEvent{ev("reward", `{"value":1,"call_id":7}`)}, true, 400, "events[0].data.call_id"},
		{"trailing data", []store.NewEvent{ev("reward", `1 2`)}, true, 400, "events[0].data"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fe := CheckEvents(tc.evs, tc.harness, 0)
			switch {
			case tc.status == 0 && fe != nil:
				t.Fatalf("refused: %v", fe)
			case tc.status != 0 && fe == nil:
				t.Fatalf("accepted, want %d on %s", tc.status, tc.field)
			case fe != nil && (fe.Status != tc.status || fe.Field != tc.field):
				t.Fatalf("refused %d on %s (%s), want %d on %s", fe.Status, fe.Field, fe.Message, tc.status, tc.field)
			}
			// Whatever the door accepts, the parser reads.
			for _, e := range tc.evs {
				if fe == nil && e.Type == store.EventReward {
					if _, err := store.ParseReward(e.Data); err != nil {
						t.Fatalf("accepted reward %s does not parse: %v", e.Data, err)
					}
				}
			}
		})
	}
	if fe := CheckEvents([]store.NewEvent{ev("reward", "5")}, true, 4); fe == nil || fe.Field != "events[0].data" {
		t.Errorf("configured bound 4 let 5 through: %v", fe)
	}
}

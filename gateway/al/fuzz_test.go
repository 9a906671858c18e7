package al_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aglrl/agl/gateway/al"
)

// FuzzALRoutes posts arbitrary bodies to the Agent Lightning routes that
// take one, with the admin key and with a rollout's scoped key, over a
// real SQLite store and agl's proxy in front of a loopback upstream.
// Whatever the body, the handler must not crash, must answer below 500
// (nothing here fails on its own; AL's own 503 for a model without
// servers aside), must answer JSON — FastAPI's
// {"detail": …} on an error — and what it stored must still read back
// through the AL routes as UTF-8 JSON. Run it longer with:
//
//	go test -run '^$' -fuzz '^FuzzALRoutes$' -fuzztime 30s ./gateway/al/
func FuzzALRoutes(f *testing.F) {
	e := newEnv(f, al.Config{}, true)
	keys, aids := e.started(f, "r1")
	scoped := "Authorization: Bearer " + keys[0]
	type route struct{ method, path, auth string }
	routes := []route{
		{"POST", "/al/api/rollouts", bearer},
		{"POST", "/al/api/models", bearer},
		{"DELETE", "/al/api/models", bearer},
		{"PATCH", "/al/api/rollouts/r1", bearer},
		{"POST", "/al/api/rollouts/r1/attempt/" + aids[0] + "/events", bearer},
		{"POST", "/al/api/rollouts/r1/attempt/" + aids[0] + "/events", scoped},
		{"POST", "/al/api/rollouts/r1/attempt/0/events", scoped},
		{"POST", "/al/proxy/rollout/r1/attempt/" + aids[0] + "/mode/train/openai/v1/chat/completions", scoped},
		{"POST", "/al/proxy/rollout/r1/attempt/0/mode/val/openai/v1/completions", scoped},
	}
	for i, s := range []string{
		`[{"input":{"q":1},"rollout_id":"f1"}]`,
		`{"model_name":"m","endpoint":"http://127.0.0.1:1/v1"}`,
		`{"model_name":"m"}`,
		`{"status":"running","metadata":{"a":1}}`,
		`{"event_type":"reward","data":{"reward":1}}`,
		`{"event_type":"model_request","data":{"prompt_token_ids":[1,2]}}`,
		`{"event_type":"reward","data":{"reward":"NaN"}}`,
		chatBody,
		`{"model":"m","prompt":"hi","max_tokens":2}`,
	} {
		f.Add(uint8(i), []byte(s))
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		rt := routes[int(which)%len(routes)]
		r := e.do(t, rt.method, rt.path, string(body), rt.auth, "Content-Type: application/json")
		// A 503 is AL's answer to an agent call once the model's last
		// server is deleted; any other 5xx is a defect.
		if r.status >= 500 && !(r.status == 503 && strings.Contains(r.body, "No servers available")) {
			t.Fatalf("%s %s %q: status %d: %s", rt.method, rt.path, body, r.status, r.body)
		}
		if r.status != 204 {
			if !json.Valid([]byte(r.body)) || !utf8.ValidString(r.body) {
				t.Fatalf("%s %s %q: status %d, answer is not UTF-8 JSON: %q", rt.method, rt.path, body, r.status, r.body)
			}
			if r.status >= 400 && !strings.Contains(r.body, `"detail"`) {
				t.Fatalf("%s %s %q: status %d without a detail: %s", rt.method, rt.path, body, r.status, r.body)
			}
		}
		for _, p := range []string{"/al/api/rollouts?state_in=running", "/al/api/rollouts/r1", "/al/api/rollouts/r1/events", "/al/api/rollouts/r1/events?format=triplet"} {
			got := e.admin(t, "GET", p, "")
			if got.status != 200 || !json.Valid([]byte(got.body)) || !utf8.ValidString(got.body) {
				t.Fatalf("after %s %s %q: GET %s: %d %q", rt.method, rt.path, body, p, got.status, got.body)
			}
		}
	})
}

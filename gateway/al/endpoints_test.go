package al_test

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"testing"

	"github.com/aglrl/agl/gateway/al"
)

// alCommit is Agent Lightning v1.0.0, whose tests/server/test_endpoints.py
// TestALEndpoints ports: every test of that file is one row below, naming
// the test and its line, with the same requests and the same
// expectations, against agl's gateway over HTTP (a real SQLite store,
// agl's proxy, a loopback upstream). AL's conftest.py (same commit) gives
// the server config: key "test-secret-key", default_proxy.model_name
// "test-model", train temperature 1, val temperature 0; every row starts
// from an empty store, as AL's autouse clean_store fixture does.
//
// Not ported: none. Where AL monkeypatches _send_upstream_with_retries
// (test_proxy_completion_endpoint, test_proxy_error_triplet_preserves_status)
// the loopback upstream answers what the fake returns and checks what the
// fake asserts (the URL's path, model, temperature, return_token_ids).
const alCommit = "8f8b8f95fd4ed664822734811b61bb3341f4ddfe"

const alModel = "test-model"

// alEnv is a gateway configured as AL's conftest server_config.
type alEnv struct {
	*env
	t *testing.T
	// upstream is what the loopback model server does with a call.
	upstream func(w http.ResponseWriter, body map[string]any, path string)
}

func newALEnv(t *testing.T) *alEnv {
	zero := 0.0
	a := &alEnv{t: t}
	a.env = newEnvWith(t, al.Config{ModelName: alModel, Val: al.ModeConfig{Temperature: &zero}}, true, alModel, func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &body); err != nil {
			t.Errorf("upstream got %q: %v", b, err)
		}
		if a.upstream == nil {
			t.Errorf("unexpected upstream call %s", r.URL.Path)
			http.Error(w, "no", 500)
			return
		}
		a.upstream(w, body, r.URL.Path)
	})
	return a
}

// call sends a JSON body (nil: none) with AL's auth header unless noAuth,
// and decodes the answer into out (if not nil).
func (a *alEnv) call(method, path string, body any, out any) int {
	a.t.Helper()
	s := ""
	if body != nil {
		b, _ := json.Marshal(body)
		s = string(b)
	}
	r := a.admin(a.t, method, "/al"+path, s)
	if out != nil {
		r.json(a.t, out)
	}
	return r.status
}

// rollout is test_endpoints.py's _rollout (line 13).
func (a *alEnv) rollout() map[string]any {
	a.t.Helper()
	var out []map[string]any
	if st := a.call("POST", "/api/rollouts", []any{map[string]any{"input": map[string]any{"prompt": "hi"}, "metadata": map[string]any{"batch_idx": 1}}}, &out); st != 201 {
		a.t.Fatalf("_rollout: %d", st)
	}
	return out[0]
}

// terminal is test_endpoints.py's _terminal (line 354).
func (a *alEnv) terminal(dataID string, isTrain bool) string {
	a.t.Helper()
	var out []map[string]any
	if st := a.call("POST", "/api/rollouts", []any{map[string]any{"input": map[string]any{"data_id": dataID}, "is_train": isTrain}}, &out); st != 201 {
		a.t.Fatalf("_terminal create: %d", st)
	}
	rid := out[0]["rollout_id"].(string)
	for _, s := range []string{"running", "succeeded"} {
		if st := a.call("PATCH", "/api/rollouts/"+rid, map[string]any{"status": map[string]any{"state": s}}, nil); st != 200 {
			a.t.Fatalf("_terminal PATCH %s: %d", s, st)
		}
	}
	return rid
}

func (a *alEnv) expect(what string, got, want any) {
	a.t.Helper()
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	var g, w any
	json.Unmarshal(gb, &g)
	json.Unmarshal(wb, &w)
	if !reflect.DeepEqual(g, w) {
		a.t.Fatalf("%s: got %s, want %s", what, gb, wb)
	}
}

func st(v map[string]any) map[string]any { return v["status"].(map[string]any) }

func TestALEndpoints(t *testing.T) {
	rows := []struct {
		test string // AL's test function
		line int    // its line in tests/server/test_endpoints.py
		run  func(a *alEnv)
	}{
		{"test_healthz", 23, func(a *alEnv) {
			r := a.do(a.t, "GET", "/al/healthz", "")
			var out any
			r.json(a.t, &out)
			a.expect("healthz", out, map[string]any{"status": "ok"})
		}},
		{"test_auth_required", 27, func(a *alEnv) {
			a.expect("status", a.do(a.t, "POST", "/al/api/rollouts", "[]").status, 401)
		}},
		{"test_rollout_endpoints", 31, func(a *alEnv) {
			ro := a.rollout()
			id := ro["rollout_id"].(string)
			a.expect("input", ro["input"], map[string]any{"prompt": "hi"})
			a.expect("batch_idx", ro["metadata"].(map[string]any)["batch_idx"], 1)
			a.expect("state", st(ro)["state"], "queuing")
			var det map[string]any
			a.expect("detail status", a.call("GET", "/api/rollouts/"+id, nil, &det), 200)
			a.expect("attempts", det["attempts"], []any{})
			var patched map[string]any
			a.expect("patch running", a.call("PATCH", "/api/rollouts/"+id, map[string]any{"status": map[string]any{"state": "running", "k8s_job_name": "job-1"}}, &patched), 200)
			a.expect("patched state", st(patched)["state"], "running")
			a.expect("k8s_job_name", st(patched)["k8s_job_name"], "job-1")
			a.expect("running -> queuing", a.call("PATCH", "/api/rollouts/"+id, map[string]any{"status": map[string]any{"state": "queuing"}}, nil), 409)
			a.expect("state cancelled", a.call("PATCH", "/api/rollouts/"+id, map[string]any{"status": map[string]any{"state": "cancelled"}}, nil), 422)
			a.expect("cancel_requested", a.call("PATCH", "/api/rollouts/"+id, map[string]any{"status": map[string]any{"cancel_requested": true}}, nil), 422)
		}},
		{"test_list_rollouts_filters_by_state_in", 72, func(a *alEnv) {
			q, r := a.rollout()["rollout_id"], a.rollout()["rollout_id"]
			a.expect("patch", a.call("PATCH", "/api/rollouts/"+r.(string), map[string]any{"status": map[string]any{"state": "running"}}, nil), 200)
			var out []map[string]any
			a.expect("list", a.call("GET", "/api/rollouts?state_in=queuing&state_in=running", nil, &out), 200)
			ids := map[string]bool{}
			for _, it := range out {
				ids[it["rollout_id"].(string)] = true
			}
			a.expect("ids", ids, map[string]bool{q.(string): true, r.(string): true})
			a.expect("list running", a.call("GET", "/api/rollouts?state_in=running", nil, &out), 200)
			a.expect("running ids", []any{out[0]["rollout_id"]}, []any{r})
			a.expect("running count", len(out), 1)
		}},
		{"test_event_endpoints", 99, func(a *alEnv) {
			id := a.rollout()["rollout_id"].(string)
			var ev map[string]any
			a.expect("post", a.call("POST", "/api/rollouts/"+id+"/attempt/0/events", map[string]any{"event_type": "reward", "data": map[string]any{"value": 0.7, "extra": "drop"}}, &ev), 200)
			a.expect("event_type", ev["event_type"], "reward")
			var evs []map[string]any
			a.expect("query", a.call("GET", "/api/rollouts/"+id+"/events?event_type=reward&format=triplet", nil, &evs), 200)
			a.expect("triplet data", evs[0]["data"], map[string]any{"value": 0.7})
			var det map[string]any
			a.call("GET", "/api/rollouts/"+id, nil, &det)
			a.expect("attempts", det["attempts"], []any{"0"})
		}},
		{"test_delete_rollout", 123, func(a *alEnv) {
			id := a.rollout()["rollout_id"].(string)
			a.call("POST", "/api/rollouts/"+id+"/attempt/0/events", map[string]any{"event_type": "reward", "data": map[string]any{"value": 0.7}}, nil)
			a.expect("delete", a.call("DELETE", "/api/rollouts/"+id, nil, nil), 204)
			a.expect("get", a.call("GET", "/api/rollouts/"+id, nil, nil), 404)
			a.expect("events", a.call("GET", "/api/rollouts/"+id+"/events", nil, nil), 404)
			a.expect("delete again", a.call("DELETE", "/api/rollouts/"+id, nil, nil), 204)
		}},
		{"test_enqueue_with_client_rollout_id_is_idempotent", 142, func(a *alEnv) {
			rid := "fixed-rollout-id-123"
			var out []map[string]any
			a.expect("create", a.call("POST", "/api/rollouts", []any{map[string]any{"rollout_id": rid, "input": map[string]any{"prompt": "a"}}}, &out), 201)
			a.expect("id", out[0]["rollout_id"], rid)
			a.call("POST", "/api/rollouts/"+rid+"/attempt/0/events", map[string]any{"event_type": "reward", "data": map[string]any{"value": 0.5}}, nil)
			a.expect("again", a.call("POST", "/api/rollouts", []any{map[string]any{"rollout_id": rid, "input": map[string]any{"prompt": "DIFFERENT"}}}, &out), 201)
			a.expect("again id", out[0]["rollout_id"], rid)
			a.expect("again input", out[0]["input"], map[string]any{"prompt": "a"})
			var det map[string]any
			a.call("GET", "/api/rollouts/"+rid, nil, &det)
			a.expect("attempts", det["attempts"], []any{"0"})
			var evs []any
			a.call("GET", "/api/rollouts/"+rid+"/events", nil, &evs)
			a.expect("events", len(evs), 1)
		}},
		{"test_re_enqueue_does_not_clobber_a_running_rollout", 175, func(a *alEnv) {
			rid := "racing-rollout-id"
			a.call("POST", "/api/rollouts", []any{map[string]any{"rollout_id": rid, "input": map[string]any{"x": 1}}}, nil)
			a.call("PATCH", "/api/rollouts/"+rid, map[string]any{"status": map[string]any{"state": "running"}}, nil)
			a.call("POST", "/api/rollouts/"+rid+"/attempt/0/events", map[string]any{"event_type": "reward", "data": map[string]any{"value": 1.0}}, nil)
			var out []map[string]any
			a.expect("again", a.call("POST", "/api/rollouts", []any{map[string]any{"rollout_id": rid, "input": map[string]any{"x": 1}}}, &out), 201)
			a.expect("again state", st(out[0])["state"], "running")
			var det map[string]any
			a.call("GET", "/api/rollouts/"+rid, nil, &det)
			a.expect("detail state", st(det["rollout"].(map[string]any))["state"], "running")
			a.expect("attempts", det["attempts"], []any{"0"})
		}},
		{"test_triplet_events_keep_last_model_request_for_duplicate_prompt", 198, func(a *alEnv) {
			id := a.rollout()["rollout_id"].(string)
			mr := func(prompt, resp []int) {
				ev := map[string]any{"event_type": "model_request", "data": map[string]any{
					"response": map[string]any{"prompt_token_ids": prompt, "choices": []any{map[string]any{"token_ids": resp}}},
					"server":   map[string]any{"model": alModel, "version": 3},
				}}
				a.expect("post model_request", a.call("POST", "/api/rollouts/"+id+"/attempt/0/events", ev, nil), 200)
			}
			mr([]int{1, 2}, []int{10})
			a.call("POST", "/api/rollouts/"+id+"/attempt/0/events", map[string]any{"event_type": "reward", "data": map[string]any{"value": 0.5}}, nil)
			mr([]int{3, 4}, []int{20})
			mr([]int{1, 2}, []int{30})
			var raw []map[string]any
			a.call("GET", "/api/rollouts/"+id+"/events?event_type=model_request", nil, &raw)
			var got []any
			for _, ev := range raw {
				got = append(got, ev["data"].(map[string]any)["response"].(map[string]any)["choices"].([]any)[0].(map[string]any)["token_ids"])
			}
			a.expect("raw", got, [][]int{{10}, {20}, {30}})
			var trip []map[string]any
			a.call("GET", "/api/rollouts/"+id+"/events?format=triplet", nil, &trip)
			var types, prompts, resps []any
			for _, ev := range trip {
				types = append(types, ev["event_type"])
			}
			for _, ev := range trip[1:] {
				prompts = append(prompts, ev["data"].(map[string]any)["prompt_token_ids"])
				resps = append(resps, ev["data"].(map[string]any)["response_token_ids"])
			}
			a.expect("types", types, []string{"reward", "model_request", "model_request"})
			a.expect("reward", trip[0]["data"], map[string]any{"value": 0.5})
			a.expect("prompts", prompts, [][]int{{3, 4}, {1, 2}})
			a.expect("responses", resps, [][]int{{20}, {30}})
		}},
		{"test_model_endpoints", 246, func(a *alEnv) {
			var out []map[string]any
			a.expect("create", a.call("POST", "/api/models", []any{map[string]any{"model": alModel, "endpoint": "http://model.test/v1", "version": 3}}, &out), 201)
			a.expect("model", out[0]["model"], alModel)
			var del any
			a.expect("delete", a.call("DELETE", "/api/models", nil, &del), 200)
			a.expect("deleted", del, map[string]any{"status": "ok"})
		}},
		{"test_proxy_completion_endpoint", 260, func(a *alEnv) {
			a.upstream = func(w http.ResponseWriter, body map[string]any, path string) {
				if path != "/v1/chat/completions" || body["model"] != alModel || body["temperature"] != 1.0 || body["return_token_ids"] != true {
					a.t.Errorf("upstream got %s %v", path, body)
				}
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"choices":[{"message":{"content":"ok"},"token_ids":[2]}],"prompt_token_ids":[1]}`)
			}
			ro := a.rollout()
			a.call("POST", "/api/models", []any{map[string]any{"model": alModel, "endpoint": a.env.upstream, "version": 3}}, nil)
			var out map[string]any
			a.expect("proxied", a.call("POST", "/proxy/rollout/"+ro["rollout_id"].(string)+"/attempt/0/mode/train/openai/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}}, &out), 200)
			a.expect("content", out["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"], "ok")
			var evs []map[string]any
			a.call("GET", "/api/rollouts/"+ro["rollout_id"].(string)+"/events?event_type=model_request&format=triplet", nil, &evs)
			a.expect("prompt", evs[0]["data"].(map[string]any)["prompt_token_ids"], []int{1})
			a.expect("response", evs[0]["data"].(map[string]any)["response_token_ids"], []int{2})
			// Beyond AL's test: the answer had no log-probs, so AL's
			// _extract_choice_log_probs (routes/events.py line 70) gives None.
			a.expect("log_probs", evs[0]["data"].(map[string]any)["response_log_probs"], nil)
			// And server is the registered Model's (model, version):
			// _capture_event, proxy.py line 229.
			a.expect("server", evs[0]["data"].(map[string]any)["server"], map[string]any{"model": alModel, "version": 3})
		}},
		{"test_proxy_error_triplet_preserves_status", 300, func(a *alEnv) {
			a.upstream = func(w http.ResponseWriter, body map[string]any, path string) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(400)
				io.WriteString(w, `{"error":{"message":"maximum context length is 32768"}}`)
			}
			ro := a.rollout()
			a.call("POST", "/api/models", []any{map[string]any{"model": alModel, "endpoint": a.env.upstream, "version": 3}}, nil)
			r := a.admin(a.t, "POST", "/al/proxy/rollout/"+ro["rollout_id"].(string)+"/attempt/0/mode/train/openai/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`)
			a.expect("proxied", r.status, 400)
			// Beyond AL's test: the body is the upstream's (AL's forward_request
			// returns JSONResponse(content=response_body), proxy.py line 141).
			var body any
			r.json(a.t, &body)
			a.expect("proxied body", body, map[string]any{"error": map[string]any{"message": "maximum context length is 32768"}})
			var evs []map[string]any
			a.call("GET", "/api/rollouts/"+ro["rollout_id"].(string)+"/events?event_type=model_request&format=triplet", nil, &evs)
			if len(evs) == 0 {
				a.t.Fatal("no model_request event for the upstream's error")
			}
			d := evs[0]["data"].(map[string]any)
			a.expect("prompt", d["prompt_token_ids"], []int{})
			a.expect("response", d["response_token_ids"], []int{})
			a.expect("http_status", d["http_status"], 400)
			a.expect("status", d["status"], "error")
			a.expect("error", d["error"], map[string]any{"message": "maximum context length is 32768"})
		}},
		{"test_proxy_admin_endpoints", 335, func(a *alEnv) {
			var p map[string]any
			a.expect("pause", a.call("POST", "/proxy/pause", map[string]any{"retry_after_seconds": 9, "reason": "scale-down"}, &p), 200)
			a.expect("paused", p["paused"], true)
			a.expect("retry_after_seconds", p["retry_after_seconds"], 9)
			a.expect("state", a.call("GET", "/proxy/state", nil, &p), 200)
			a.expect("reason", p["reason"], "scale-down")
			a.expect("resume", a.call("POST", "/proxy/resume", nil, &p), 200)
			a.expect("resumed", p["paused"], false)
		}},
		{"test_terminal_rollouts_cursor_pagination", 368, func(a *alEnv) {
			var out []map[string]any
			a.call("POST", "/api/rollouts", []any{map[string]any{"input": map[string]any{"data_id": "pending"}}}, &out)
			pending := out[0]["rollout_id"]
			ra, rb, rc := a.terminal("a", true), a.terminal("b", false), a.terminal("c", true)
			var p1, p2, p3 map[string]any
			a.expect("page1", a.call("GET", "/api/rollouts/terminal?after=0&limit=2", nil, &p1), 200)
			a.expect("total", p1["total_terminal"], 3)
			a.expect("next_after", p1["next_after"], 2)
			items := p1["items"].([]any)
			a.expect("ids", []any{items[0].(map[string]any)["rollout_id"], items[1].(map[string]any)["rollout_id"]}, []string{ra, rb})
			a.expect("item", items[0], map[string]any{"rollout_id": ra, "state": "succeeded", "data_id": "a", "is_train": true})
			a.expect("is_train", items[1].(map[string]any)["is_train"], false)
			a.call("GET", "/api/rollouts/terminal?after=2&limit=2", nil, &p2)
			items2 := p2["items"].([]any)
			a.expect("page2", []any{items2[0].(map[string]any)["rollout_id"]}, []string{rc})
			a.expect("page2 count", len(items2), 1)
			a.expect("page2 next", p2["next_after"], 3)
			a.call("GET", "/api/rollouts/terminal?after=3", nil, &p3)
			a.expect("page3", p3, map[string]any{"items": []any{}, "next_after": 3, "total_terminal": 3})
			for _, it := range append(items, items2...) {
				if it.(map[string]any)["rollout_id"] == pending {
					a.t.Fatal("pending rollout in the terminal log")
				}
			}
		}},
	}
	for _, row := range rows {
		t.Run(row.test, func(t *testing.T) {
			t.Parallel()
			t.Logf("AL %s tests/server/test_endpoints.py:%d", alCommit[:8], row.line)
			row.run(newALEnv(t))
		})
	}
}

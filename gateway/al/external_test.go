package al_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/gateway/al"
	"github.com/aglrl/agl/store"
)

// AL v1.0.0 (commit 8f8b8f95fd4ed664822734811b61bb3341f4ddfe) is the
// source these sequences were read from.

// TestExternalLocalReconciler is the request sequence of AL's
// LocalReconciler (agentlightning/controller/local_reconciler.py): list
// queuing and running rollouts (_reconcile_once, lines 129-134), spawn and
// PATCH running with last_attempt_id "0" (_spawn_for, line 243; _patch,
// lines 266-276), the agent's calls and events with the server key (the
// AGL_KEY it is given, line 207), then PATCH succeeded with
// last_attempt_id (_finish_proc, line 174) — and for a second rollout
// whose process failed, PATCH failed with "subprocess exited with code 1"
// (lines 175-179).
func TestExternalLocalReconciler(t *testing.T) {
	t.Parallel()
	e := newEnv(t, al.Config{}, true)
	e.admin(t, "POST", "/al/api/models", `[{"model":"m","endpoint":"`+e.upstream+`"}]`)
	e.admin(t, "POST", "/al/api/rollouts", `[{"rollout_id":"ok","input":{"q":1},"config":{"local":{"agent_class":"a:A"}}},{"rollout_id":"bad","input":{"q":2},"is_train":false}]`)
	steps := []struct {
		name, method, path, body string
		status                   int
		has                      string
	}{
		{"poll", "GET", "/al/api/rollouts?state_in=queuing&state_in=running&limit=50", "", 200, `"rollout_id":"bad"`},
		{"spawn ok", "PATCH", "/al/api/rollouts/ok", `{"status":{"state":"running","last_attempt_id":"0"}}`, 200, `"state":"running","k8s_job_name":null,"last_attempt_id":"0","error_message":null,"version":2`},
		{"spawn bad", "PATCH", "/al/api/rollouts/bad", `{"status":{"state":"running","last_attempt_id":"0"}}`, 200, `"state":"running"`},
		{"agent call", "POST", "/al/proxy/rollout/ok/attempt/0/mode/train/openai/v1/chat/completions", chatBody, 200, `"content":"ok"`},
		{"agent reward", "POST", "/al/api/rollouts/ok/attempt/0/events", `{"event_type":"reward","data":{"value":1.0}}`, 200, `"attempt_id":"0"`},
		{"agent log", "POST", "/al/api/rollouts/ok/attempt/0/events", `{"event_type":"my_event","data":{"x":[1]}}`, 200, `"event_type":"my_event"`},
		{"poll while running", "GET", "/al/api/rollouts?state_in=running&limit=50", "", 200, `"last_attempt_id":"0"`},
		{"finish ok", "PATCH", "/al/api/rollouts/ok", `{"status":{"state":"succeeded","last_attempt_id":"0"}}`, 200, `"state":"succeeded","k8s_job_name":null,"last_attempt_id":"0","error_message":null,"version":3`},
		{"finish bad", "PATCH", "/al/api/rollouts/bad", `{"status":{"state":"failed","error_message":"subprocess exited with code 1"}}`, 200, `"state":"failed","k8s_job_name":null,"last_attempt_id":"0","error_message":"subprocess exited with code 1","version":3`},
		{"call after the end (within the 1 s cache)", "POST", "/al/proxy/rollout/ok/attempt/0/mode/train/openai/v1/chat/completions", chatBody, 409, `{"detail":"Rollout ok has no running attempt 0"}`},
		{"finished twice", "PATCH", "/al/api/rollouts/ok", `{"status":{"state":"succeeded"}}`, 409, `cannot transition succeeded -> succeeded`},
		{"terminal", "GET", "/al/api/rollouts/terminal?after=0", "", 200, `"items":[{"rollout_id":"ok","state":"succeeded","data_id":"","is_train":true},{"rollout_id":"bad","state":"failed","data_id":"","is_train":false}],"next_after":2,"total_terminal":2`},
	}
	for _, s := range steps {
		r := e.admin(t, s.method, s.path, s.body)
		if r.status != s.status || !strings.Contains(r.body, s.has) {
			t.Fatalf("%s: %d %s, want %d with %s", s.name, r.status, r.body, s.status, s.has)
		}
	}
	var trip []map[string]any
	e.admin(t, "GET", "/al/api/rollouts/ok/events?format=triplet", "").json(t, &trip)
	var types []string
	for _, ev := range trip {
		types = append(types, ev["event_type"].(string))
	}
	if strings.Join(types, ",") != "model_request,reward,my_event" {
		t.Fatalf("triplet events %v", trip)
	}
	ro, err := e.st.GetRollout(context.Background(), "ok")
	if err != nil || len(ro.Attempts) != 1 || ro.Attempts[0].WorkerID != al.ExternalWorker || ro.Attempts[0].Status != store.AttemptSucceeded {
		t.Fatalf("agl's view of the external rollout: %+v %v", ro, err)
	}
}

// TestExternalK8sReconciler is the sequence of AL's K8s reconciler
// (agentlightning/controller/k8s_reconciler.py): the Job is created while
// the rollout stays queuing (_create_job, line 244: "without changing
// rollout state"), so the agent's first LLM call can come before the
// reconciler's PATCH running; agl starts the attempt on that call, and AL's
// view still says queuing (AL changes no state on a write). The
// reconciler, seeing its Job running and the rollout queuing, PATCHes
// running with k8s_job_name and last_attempt_id (lines 217-224), then
// succeeded when the Job completes (lines 236-242); agl keeps both.
func TestExternalK8sReconciler(t *testing.T) {
	t.Parallel()
	e := newEnv(t, al.Config{}, true)
	e.admin(t, "POST", "/al/api/models", `[{"model":"m","endpoint":"`+e.upstream+`"}]`)
	e.admin(t, "POST", "/al/api/rollouts", `[{"rollout_id":"k","input":{"q":1},"config":{"k8s":{"job_template":"t"}}},{"rollout_id":"j","input":{"q":2}}]`)
	steps := []struct {
		name, method, path, body string
		status                   int
		has                      string
	}{
		{"call before the PATCH", "POST", "/al/proxy/rollout/k/attempt/0/mode/train/openai/v1/chat/completions", chatBody, 200, `"content":"ok"`},
		{"still queuing", "GET", "/al/api/rollouts?state_in=queuing&state_in=running&limit=500", "", 200, `"rollout_id":"k","input":{"q":1},"is_train":true,"config":{"timeout_seconds":3600,"local":null,"k8s":{"job_template":"t"}},"metadata":{"batch_idx":null,"sample_idx_in_batch":null},"status":{"state":"queuing","k8s_job_name":null,"last_attempt_id":null,"error_message":null,"version":1`},
		{"listed as queuing alone", "GET", "/al/api/rollouts?state_in=queuing", "", 200, `"rollout_id":"k"`},
		{"job seen running", "PATCH", "/al/api/rollouts/k", `{"status":{"state":"running","k8s_job_name":"agl-rollout-k","last_attempt_id":"0"}}`, 200, `"state":"running","k8s_job_name":"agl-rollout-k","last_attempt_id":"0","error_message":null,"version":2`},
		{"not queuing any more", "GET", "/al/api/rollouts?state_in=queuing", "", 200, `"rollout_id":"j"`},
		{"job complete", "PATCH", "/al/api/rollouts/k", `{"status":{"state":"succeeded","k8s_job_name":"agl-rollout-k","last_attempt_id":"0","error_message":null}}`, 200, `"state":"succeeded","k8s_job_name":"agl-rollout-k","last_attempt_id":"0","error_message":null,"version":3`},
		{"job running", "PATCH", "/al/api/rollouts/j", `{"status":{"state":"running","k8s_job_name":"agl-rollout-j","last_attempt_id":"0"}}`, 200, `"k8s_job_name":"agl-rollout-j"`},
		{"job failed", "PATCH", "/al/api/rollouts/j", `{"status":{"state":"failed","k8s_job_name":"agl-rollout-j","last_attempt_id":"0","error_message":"Job failed: BackoffLimitExceeded"}}`, 200, `"state":"failed","k8s_job_name":"agl-rollout-j","last_attempt_id":"0","error_message":"Job failed: BackoffLimitExceeded","version":3`},
		{"kept", "GET", "/al/api/rollouts/k", "", 200, `"k8s_job_name":"agl-rollout-k"`},
	}
	for _, s := range steps {
		r := e.admin(t, s.method, s.path, s.body)
		if r.status != s.status || !strings.Contains(r.body, s.has) {
			t.Fatalf("%s: %d %s, want %d with %s", s.name, r.status, r.body, s.status, s.has)
		}
		if s.name == "not queuing any more" && strings.Contains(r.body, `"rollout_id":"k"`) {
			t.Fatalf("%s: %s lists k, which its PATCH made running", s.name, r.body)
		}
	}
	ro, err := e.st.GetRollout(context.Background(), "k")
	if err != nil || len(ro.Attempts) != 1 || ro.Attempts[0].Status != store.AttemptSucceeded {
		t.Fatalf("the call and the PATCH to running started one attempt: %+v %v", ro, err)
	}
}

// TestExternalAndAglNeverBoth: AL's reconciler (PATCH running) and agl's
// controller (a store claim) racing for the same rollouts: each rollout
// gets exactly one attempt, by one of them; the loser's PATCH is a 409
// and an external terminal PATCH on agl's rollout is refused.
func TestExternalAndAglNeverBoth(t *testing.T) {
	t.Parallel()
	e := newEnv(t, al.Config{}, false)
	const n = 20
	var body []map[string]any
	for i := range n {
		body = append(body, map[string]any{"rollout_id": fmt.Sprint("r", i), "input": i})
	}
	b, _ := json.Marshal(body)
	e.admin(t, "POST", "/al/api/rollouts", string(b))
	var wg sync.WaitGroup
	var mu sync.Mutex
	patched, claimed := map[string]bool{}, map[string]bool{}
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := range n {
			id := fmt.Sprint("r", i)
			r := e.admin(t, "PATCH", "/al/api/rollouts/"+id, `{"status":{"state":"running","last_attempt_id":"0"}}`)
			switch {
			case r.status == 200:
				mu.Lock()
				patched[id] = true
				mu.Unlock()
			case r.status != 409 || !strings.Contains(r.body, "cannot transition running -> running"):
				t.Errorf("patch %s: %d %s", id, r.status, r.body)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for {
			cl, err := e.st.Claim(context.Background(), store.ClaimRequest{WorkerID: "agl-controller"})
			if errors.Is(err, store.ErrNoneQueued) {
				return
			}
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			claimed[cl.Rollout.ID] = true
			mu.Unlock()
		}
	}()
	wg.Wait()
	for i := range n {
		id := fmt.Sprint("r", i)
		ro, err := e.st.GetRollout(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if len(ro.Attempts) != 1 || patched[id] == claimed[id] {
			t.Fatalf("%s: %d attempts, patched %v, claimed by agl %v", id, len(ro.Attempts), patched[id], claimed[id])
		}
		if want := map[bool]string{true: al.ExternalWorker, false: "agl-controller"}[patched[id]]; ro.Attempts[0].WorkerID != want {
			t.Fatalf("%s: worker %s, want %s", id, ro.Attempts[0].WorkerID, want)
		}
		if claimed[id] {
			if r := e.admin(t, "PATCH", "/al/api/rollouts/"+id, `{"status":{"state":"succeeded"}}`); r.status != 409 {
				t.Fatalf("external PATCH ended agl's rollout %s: %d %s", id, r.status, r.body)
			}
		}
	}
}

// TestOpenAPI: /openapi.json answers without a key with AL's info
// (FastAPI(title="Agent Lightning", version="1.0.0"), app.py line 75) and
// names AL's operations.
func TestOpenAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, al.Config{}, false)
	r := e.do(t, "GET", "/al/openapi.json", "")
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Info    map[string]string         `json:"info"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	r.json(t, &doc)
	if r.status != 200 || doc.Info["title"] != "Agent Lightning" || doc.Info["version"] != "1.0.0" || len(doc.Info) != 2 {
		t.Fatalf("openapi: %d %s", r.status, r.body)
	}
	if doc.Paths["/api/rollouts/{rollout_id}"]["patch"] == nil || doc.Paths["/proxy/pause"]["post"] == nil {
		t.Fatalf("openapi paths %v", doc.Paths)
	}
}

// TestStickiness: with any number of registered endpoints, every call of
// a rollout reaches the one AL's ProxyRouter.select_server picks
// (agentlightning/server/proxy.py lines 52-60): the endpoints sorted, the
// first 8 bytes of SHA-256(rollout id) big-endian, modulo their number.
func TestStickiness(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 3, 5} {
		t.Run(fmt.Sprint(n, " endpoints"), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, al.Config{}, true)
			var mu sync.Mutex
			got := map[string]map[string]int{} // rollout → endpoint → calls
			eps := []string{e.upstream}
			hit := func(ep string) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					var body map[string]any
					json.NewDecoder(r.Body).Decode(&body)
					rid := body["messages"].([]any)[0].(map[string]any)["content"].(string)
					mu.Lock()
					if got[rid] == nil {
						got[rid] = map[string]int{}
					}
					got[rid][ep]++
					mu.Unlock()
					w.Header().Set("Content-Type", "application/json")
					io.WriteString(w, vllmAnswer)
				}
			}
			for range n {
				var ep string
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hit(ep)(w, r) }))
				t.Cleanup(srv.Close)
				ep = srv.URL + "/v1"
				eps = append(eps, ep)
			}
			var reg []map[string]any
			for _, ep := range eps[1:] {
				reg = append(reg, map[string]any{"model": "m", "endpoint": ep})
			}
			b, _ := json.Marshal(reg)
			e.admin(t, "POST", "/al/api/models", string(b))
			sorted := slices.Sorted(slices.Values(eps[1:]))
			var ids []string
			for i := range 8 {
				ids = append(ids, fmt.Sprint("rollout-", i))
			}
			e.admin(t, "POST", "/al/api/rollouts", func() string {
				var rs []map[string]any
				for _, id := range ids {
					rs = append(rs, map[string]any{"rollout_id": id, "input": id})
				}
				b, _ := json.Marshal(rs)
				return string(b)
			}())
			for _, id := range ids {
				for range 3 {
					if r := e.admin(t, "POST", "/al/proxy/rollout/"+id+"/attempt/0/mode/train/openai/v1/chat/completions", `{"messages":[{"role":"user","content":"`+id+`"}]}`); r.status != 200 {
						t.Fatalf("%s: %d %s", id, r.status, r.body)
					}
				}
				d := sha256.Sum256([]byte(id))
				want := sorted[binary.BigEndian.Uint64(d[:8])%uint64(len(sorted))]
				if len(got[id]) != 1 || got[id][want] != 3 {
					t.Fatalf("%s: calls by endpoint %v, want all 3 on %s", id, got[id], want)
				}
			}
		})
	}
}

// TestExternalHeartbeat: AL has no heartbeat; an external controller is
// alive while it polls. A poll listing the external rollout refreshes its
// attempt's heartbeat (at most every 5 s), so agl's reaper leaves it
// running; agl's own rollouts are not touched.
func TestExternalHeartbeat(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the 5 s heartbeat throttle")
	}
	t.Parallel()
	e := newEnv(t, al.Config{}, false)
	e.admin(t, "POST", "/al/api/rollouts", `[{"rollout_id":"x","input":1}]`)
	if r := e.admin(t, "PATCH", "/al/api/rollouts/x", `{"status":{"state":"running"}}`); r.status != 200 {
		t.Fatalf("patch: %d %s", r.status, r.body)
	}
	_, aids := e.started(t, "own")
	beat := func(id string) time.Time {
		ro, err := e.st.GetRollout(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return ro.Attempts[0].LastHeartbeat
	}
	x0, own0 := beat("x"), beat("own")
	e.admin(t, "GET", "/al/api/rollouts?state_in=running", "")
	if !beat("x").Equal(x0) {
		t.Fatal("a poll right after the start beat again (throttle)")
	}
	time.Sleep(5100 * time.Millisecond)
	e.admin(t, "GET", "/al/api/rollouts?state_in=running", "")
	if !beat("x").After(x0) {
		t.Fatal("the poll did not refresh the external attempt's heartbeat")
	}
	if !beat("own").Equal(own0) {
		t.Fatalf("the poll beat agl's own attempt %s", aids[0])
	}
}

// TestVerbatimAnswer: on /al the caller gets the upstream's answer as it
// sent it, every field (AL's forward_request returns
// JSONResponse(content=response_body), proxy.py line 141), success and
// error alike; agl's own /r/ route keeps its encoding and error shape.
func TestVerbatimAnswer(t *testing.T) {
	t.Parallel()
	const ok = `{"id":"up","object":"chat.completion","created":1,"model":"m","prompt_token_ids":[1,2,3],"kv_transfer_params":{"remote_block_ids":[4]},` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"ok","reasoning_content":null},"logprobs":{"content":[{"token":"ok","logprob":-0.5}]},` +
		`"finish_reason":"stop","stop_reason":null,"token_ids":[7]}],"usage":{"prompt_tokens":3,"completion_tokens":1},"system_fingerprint":"x"}`
	const bad = `{"object":"error","message":"This model's maximum context length is 8","type":"BadRequestError","param":null,"code":400}`
	e := newEnvWith(t, al.Config{}, true, "m", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		w.Header().Set("Content-Type", "application/json")
		if body["messages"].([]any)[0].(map[string]any)["content"] == "too long" {
			w.WriteHeader(400)
			io.WriteString(w, bad)
			return
		}
		io.WriteString(w, ok)
	})
	keys, aids := e.started(t, "r")
	e.admin(t, "POST", "/al/api/models", `[{"model":"m","endpoint":"`+e.upstream+`"}]`)
	k := "Authorization: Bearer " + keys[0]
	alPath := "/al/proxy/rollout/r/attempt/0/mode/train/openai/v1/chat/completions"
	msg := func(s string) string { return `{"messages":[{"role":"user","content":"` + s + `"}]}` }
	if r := e.do(t, "POST", alPath, msg("hi"), k); r.status != 200 || r.body != ok {
		t.Fatalf("/al answer %d %s\nwant the upstream's %s", r.status, r.body, ok)
	}
	if r := e.do(t, "POST", alPath, msg("too long"), k); r.status != 400 || r.body != bad {
		t.Fatalf("/al error %d %s\nwant the upstream's %s", r.status, r.body, bad)
	}
	native := "/r/r/" + aids[0] + "/v1/chat/completions"
	if r := e.do(t, "POST", native, msg("hi"), k); r.status != 200 || strings.Contains(r.body, "kv_transfer_params") {
		t.Fatalf("/r/ answer %d %s: want agl's encoding", r.status, r.body)
	}
	if r := e.do(t, "POST", native, msg("too long"), k); r.status != 400 || !strings.Contains(r.body, `"message":"upstream: This model's maximum context length is 8"`) {
		t.Fatalf("/r/ error %d %s: want agl's shape", r.status, r.body)
	}
}

// TestPrepareBody: the body /al forwards is AL's ProxyRouter.prepare_body
// (proxy.py lines 62-81): the agent's fields as sent (chat_template_kwargs,
// max_tokens unclamped, top_logprobs), model and the mode's temperature
// set, return_token_ids true, logprobs true in train mode only, nothing
// added (no stream); agl's /r/ route keeps its own body.
func TestPrepareBody(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []map[string]any
	e := newEnvWith(t, al.Config{}, true, "m", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		got = append(got, body)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, vllmAnswer)
	})
	keys, aids := e.started(t, "r")
	e.admin(t, "POST", "/al/api/models", `[{"model":"m","endpoint":"`+e.upstream+`"}]`)
	agent := `{"model":"whatever","messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"enable_thinking":false},"max_tokens":100000,"top_logprobs":2,"logprobs":false}`
	var sent map[string]any
	json.Unmarshal([]byte(agent), &sent)
	want := func(mode string) map[string]any {
		w := maps.Clone(sent)
		w["model"], w["return_token_ids"] = "m", true
		w["temperature"] = 1.0
		if mode == "val" {
			w["temperature"] = 0.7
		} else {
			w["logprobs"] = true
		}
		return w
	}
	k := "Authorization: Bearer " + keys[0]
	for _, mode := range []string{"train", "val"} {
		if r := e.do(t, "POST", "/al/proxy/rollout/r/attempt/0/mode/"+mode+"/openai/v1/chat/completions", agent, k); r.status != 200 {
			t.Fatalf("%s: %d %s", mode, r.status, r.body)
		}
		mu.Lock()
		last := got[len(got)-1]
		mu.Unlock()
		if !reflect.DeepEqual(last, want(mode)) {
			b1, _ := json.Marshal(last)
			b2, _ := json.Marshal(want(mode))
			t.Fatalf("%s: upstream got %s\nwant AL's prepare_body %s", mode, b1, b2)
		}
	}
	if r := e.do(t, "POST", "/r/r/"+aids[0]+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"enable_thinking":false}}`, k); r.status != 200 {
		t.Fatalf("/r/: %d %s", r.status, r.body)
	}
	mu.Lock()
	last := got[len(got)-1]
	mu.Unlock()
	if _, ok := last["stream"]; !ok {
		t.Fatalf("/r/ forwarded %v: want agl's own body", last)
	}
}

// TestUpstreamUnreachable: no answer from the upstream after the retries
// is AL's 502 {"detail": "Upstream model server request failed"}
// (_send_upstream_with_retries, proxy.py line 163) on /al.
func TestUpstreamUnreachable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, al.Config{}, true)
	keys, _ := e.started(t, "r")
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	e.admin(t, "POST", "/al/api/models", `[{"model":"m","endpoint":"`+gone.URL+`/v1"}]`)
	r := e.do(t, "POST", "/al/proxy/rollout/r/attempt/0/mode/train/openai/v1/chat/completions", chatBody, "Authorization: Bearer "+keys[0])
	if r.status != 502 || r.body != `{"detail":"Upstream model server request failed"}` {
		t.Fatalf("unreachable upstream: %d %s", r.status, r.body)
	}
	// AL raises before _capture_event (proxy.py lines 124-140, 156-178):
	// no model_request is recorded for a call that got no answer.
	evs, err := e.st.ListEvents(context.Background(), store.EventFilter{RolloutID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Type == store.EventModelRequest {
			t.Fatalf("a call the upstream never answered left a record: %s", ev.Data)
		}
	}
}

// TestRefusalShape: a call agl's proxy refuses on /al (here an empty
// message list, with the agent's scoped key) is answered in FastAPI's
// {"detail": …} shape, as AL answers its refusals (HTTPException), and
// its record keeps the body the caller got; the same call on /r/ keeps
// OpenAI's shape.
func TestRefusalShape(t *testing.T) {
	t.Parallel()
	e := newEnv(t, al.Config{}, true)
	keys, aids := e.started(t, "r")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a refused call reached the upstream: %s", r.URL.Path)
	}))
	defer up.Close()
	e.admin(t, "POST", "/al/api/models", `[{"model":"m","endpoint":"`+up.URL+`/v1"}]`)
	r := e.do(t, "POST", "/al/proxy/rollout/r/attempt/0/mode/train/openai/v1/chat/completions", `{"messages":[]}`, "Authorization: Bearer "+keys[0])
	var detail struct {
		Detail string `json:"detail"`
	}
	if r.status != 400 || json.Unmarshal([]byte(r.body), &detail) != nil || detail.Detail == "" || strings.Contains(r.body, `"error"`) {
		t.Fatalf("/al refusal: %d %s, want 400 {\"detail\": …}", r.status, r.body)
	}
	if r := e.do(t, "POST", "/r/r/"+aids[0]+"/v1/chat/completions", `{"messages":[]}`, "Authorization: Bearer "+keys[0]); r.status != 400 || !strings.Contains(r.body, `"error":{"message"`) {
		t.Fatalf("/r/ refusal: %d %s, want OpenAI's shape", r.status, r.body)
	}
	evs, err := e.st.ListEvents(context.Background(), store.EventFilter{RolloutID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for _, ev := range evs {
		if ev.Type == store.EventModelRequest {
			var mc api.ModelCall
			if err := json.Unmarshal(ev.Data, &mc); err != nil {
				t.Fatal(err)
			}
			bodies = append(bodies, mc.Error)
		}
	}
	if len(bodies) != 2 || bodies[0] != r.body {
		t.Fatalf("records %q, want the /al refusal's body %s first, then /r/'s", bodies, r.body)
	}
}

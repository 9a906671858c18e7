package al_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/engine/upstream"
	"github.com/aglrl/agl/gateway"
	"github.com/aglrl/agl/gateway/al"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/sqlite"
)

const adminKey = "al-admin-key"

// vllmAnswer is a vLLM-format chat completion with token ids and log-probs.
const vllmAnswer = `{"id":"up","object":"chat.completion","created":1,"model":"m","prompt_token_ids":[1,2,3],` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"logprobs":{"content":[{"token":"ok","logprob":-0.5}]},` +
	`"finish_reason":"stop","token_ids":[7]}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`

type env struct {
	st       store.Store
	srv      *httptest.Server
	upCalls  atomic.Int64
	upstream string
}

// newEnv runs a gateway with the AL API (model_name m) over a real SQLite
// store and agl's proxy in front of a vLLM-format upstream on loopback.
func newEnv(t testing.TB, cfg al.Config, withLLM bool) *env {
	return newEnvWith(t, cfg, withLLM, "m", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, vllmAnswer)
	})
}

// newEnvWith is newEnv with the engine's model name and the upstream's
// handler given.
func newEnvWith(t testing.TB, cfg al.Config, withLLM bool, model string, upstreamHandler http.HandlerFunc) *env {
	t.Helper()
	e := &env{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.upCalls.Add(1)
		upstreamHandler(w, r)
	}))
	t.Cleanup(up.Close)
	e.upstream = up.URL + "/v1"
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "agl.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.st = st
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	opt := gateway.Options{Store: st, AdminKey: adminKey, ReapInterval: -1, Logger: quiet}
	var px *proxy.Proxy
	var changed func(context.Context)
	if withLLM {
		cl, err := upstream.New(upstream.Config{Models: []upstream.Model{{Name: model, Endpoints: []string{e.upstream}}}})
		if err != nil {
			t.Fatal(err)
		}
		px = proxy.New(proxy.Config{}, st, proxy.NewUpstreamBackend(cl))
		opt.LLM = px
		// As agl gateway: the routing table follows the model registry.
		changed = proxy.NewModelSync(st, cl, quiet).Changed
		opt.ModelsChanged = changed
	}
	gw := gateway.New(opt)
	ao := al.Options{Config: cfg, Store: st, Late: st, IsAdmin: gw.IsAdmin, Logger: quiet, DefaultModel: model, ModelsChanged: changed}
	if px != nil {
		ao.LLM = px
	}
	h := al.New(ao)
	gw.Handle(h.Prefix()+"/", http.StripPrefix(h.Prefix(), h))
	e.srv = httptest.NewServer(gw)
	t.Cleanup(func() { e.srv.Close(); st.Close() })
	return e
}

type resp struct {
	status int
	header http.Header
	body   string
}

func (r resp) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(r.body), v); err != nil {
		t.Fatalf("decode %q: %v", r.body, err)
	}
}

// do sends body (a string, sent as is) with headers "Name: value".
func (e *env) do(t testing.TB, method, path, body string, headers ...string) resp {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Add(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{res.StatusCode, res.Header, string(b)}
}

const bearer = "Authorization: Bearer " + adminKey

func (e *env) admin(t testing.TB, method, path, body string) resp {
	t.Helper()
	return e.do(t, method, path, body, bearer)
}

// started creates AL rollouts and claims each (the controller's step),
// returning their scoped keys and attempt ids.
func (e *env) started(t testing.TB, ids ...string) (keys, aids []string) {
	t.Helper()
	var body []map[string]any
	for _, id := range ids {
		body = append(body, map[string]any{"input": map[string]any{"q": id}, "rollout_id": id})
	}
	b, _ := json.Marshal(body)
	if r := e.admin(t, "POST", "/al/api/rollouts", string(b)); r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	for range ids {
		cl, err := e.st.Claim(context.Background(), store.ClaimRequest{WorkerID: "test"})
		if err != nil {
			t.Fatal(err)
		}
		keys, aids = append(keys, cl.Key), append(aids, cl.Attempt.ID)
	}
	return keys, aids
}

func detail(t *testing.T, r resp) string {
	t.Helper()
	var d struct {
		Detail any `json:"detail"`
	}
	r.json(t, &d)
	if s, ok := d.Detail.(string); ok {
		return s
	}
	b, _ := json.Marshal(d.Detail)
	return string(b)
}

const chatBody = `{"model":"anything","messages":[{"role":"user","content":"hi"}]}`

// TestAgentRouteOrder: the agent route's outcomes come in AL's order —
// auth, the 404s, bad JSON, no server, paused, stream — each in FastAPI's
// {"detail": …} shape; paused calls are not forwarded.
func TestAgentRouteOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, al.Config{}, true)
	keys, _ := e.started(t, "r1", "r0")
	// r2 runs under an external controller, whose agents call with the
	// server key; r0 under agl's, where such a call is refused.
	e.admin(t, "POST", "/al/api/rollouts", `[{"rollout_id":"r2","input":2}]`)
	e.admin(t, "PATCH", "/al/api/rollouts/r2", `{"status":{"state":"running"}}`)
	route := func(rid, mode, path string) string {
		return "/al/proxy/rollout/" + rid + "/attempt/0/mode/" + mode + "/openai/v1/" + path
	}
	ok := route("r1", "train", "chat/completions")
	steps := []struct {
		name    string
		setup   string // an admin call made first: "pause", "resume", "models", "nomodels"
		path    string
		body    string
		headers []string
		status  int
		detail  string
	}{
		{name: "no key", path: ok, body: chatBody, status: 401, detail: "Invalid or missing API key"},
		{name: "wrong key", path: ok, body: chatBody, headers: []string{"Authorization: Bearer nope"}, status: 401, detail: "Invalid or missing API key"},
		{name: "other rollout's key", path: ok, body: chatBody, headers: []string{"X-API-Key: " + keys[1]}, status: 401, detail: "Invalid or missing API key"},
		{name: "two different keys", path: ok, body: chatBody, headers: []string{bearer, "X-API-Key: " + keys[0]}, status: 401, detail: "Invalid or missing API key"},
		{name: "bad mode before unknown rollout", path: route("nope", "test", "chat/completions"), body: "{", headers: []string{bearer}, status: 404, detail: "Unsupported proxy mode: test"},
		{name: "bad path", path: route("nope", "train", "responses"), body: "{", headers: []string{bearer}, status: 404, detail: "Unsupported upstream path: responses"},
		{name: "unknown rollout", path: route("nope", "train", "chat/completions"), body: "{", headers: []string{bearer}, status: 404, detail: "Rollout not found: nope"},
		{name: "bad JSON before no server", path: ok, body: "{", headers: []string{bearer}, status: 400, detail: "Invalid JSON in request body"},
		{name: "no server", path: ok, body: chatBody, headers: []string{bearer}, status: 503, detail: "No servers available for model 'm'"},
		{name: "paused", setup: "models,pause", path: ok, body: `{"stream":true}`, headers: []string{"X-API-Key: " + keys[0]}, status: 429},
		{name: "stream", setup: "resume", path: ok, body: `{"stream":true,"messages":[]}`, headers: []string{"Authorization: Bearer " + keys[0]}, status: 400, detail: "Streaming responses are not supported"},
		{name: "scoped key call", path: ok, body: chatBody, headers: []string{"Authorization: Bearer " + keys[0]}, status: 200},
		{name: "admin call, val mode", path: route("r2", "val", "chat/completions"), body: chatBody, headers: []string{bearer}, status: 200},
		{name: "admin call on agl's rollout", path: route("r0", "train", "chat/completions"), body: chatBody, headers: []string{bearer}, status: 409, detail: "Rollout r0 is run by agl's controller (attempt 1): its agent calls with its own key"},
	}
	for _, s := range steps {
		for _, step := range strings.Split(s.setup, ",") {
			switch step {
			case "models":
				e.admin(t, "POST", "/al/api/models", `[{"model":"m","endpoint":"`+e.upstream+`"}]`)
			case "pause":
				e.admin(t, "POST", "/al/proxy/pause", `{"retry_after_seconds":7,"reason":"swap"}`)
			case "resume":
				e.admin(t, "POST", "/al/proxy/resume", "")
			}
		}
		before := e.upCalls.Load()
		r := e.do(t, "POST", s.path, s.body, s.headers...)
		if r.status != s.status {
			t.Fatalf("%s: %d %s, want %d", s.name, r.status, r.body, s.status)
		}
		if s.detail != "" && detail(t, r) != s.detail {
			t.Fatalf("%s: detail %q, want %q", s.name, detail(t, r), s.detail)
		}
		if s.status == 429 {
			if r.header.Get("Retry-After") != "7" || r.header.Get("X-Agl-Paused") != "true" || r.body != `{"error":"gateway paused","reason":"swap"}`+"\n" {
				t.Fatalf("paused answer %v %s", r.header, r.body)
			}
		}
		if forwarded := e.upCalls.Load() > before; forwarded != (s.status == 200) {
			t.Fatalf("%s: forwarded to the upstream: %v", s.name, forwarded)
		}
	}
	// The two calls are recorded; a val call's triplet reads like a train one.
	for _, rid := range []string{"r1", "r2"} {
		var evs []map[string]any
		e.admin(t, "GET", "/al/api/rollouts/"+rid+"/events?format=triplet", "").json(t, &evs)
		if len(evs) != 1 {
			t.Fatalf("%s: %d triplet events", rid, len(evs))
		}
		b, _ := json.Marshal(evs[0]["data"])
		if want := `{"http_status":200,"prompt_token_ids":[1,2,3],"response_log_probs":[-0.5],"response_token_ids":[7],"server":{"model":"m","version":0},"status":"ok"}`; string(b) != want {
			t.Fatalf("%s triplet %s, want %s", rid, b, want)
		}
	}
	var st map[string]any
	e.admin(t, "GET", "/al/proxy/state", "").json(t, &st)
	if st["inflight"] != 0.0 || st["paused"] != false || st["retry_after_seconds"] != 7.0 {
		t.Fatalf("state %v", st)
	}
}

// TestScopedKeyReach: an attempt's key reads its own rollout and its
// events (less the controller's) and posts AL's harness events to it
// (rewards, logs, custom), never another rollout's nor an admin route.
func TestScopedKeyReach(t *testing.T) {
	t.Parallel()
	e := newEnv(t, al.Config{}, false)
	keys, aids := e.started(t, "a", "b")
	k := "Authorization: Bearer " + keys[0]
	cases := []struct {
		method, path, body string
		status             int
	}{
		{"POST", "/al/api/rollouts/a/attempt/0/events", `{"event_type":"reward","data":{"value":1,"source":"agent"}}`, 200},
		{"POST", "/al/api/rollouts/a/attempt/0/events", `{"event_type":"model_request","data":{}}`, 403},
		{"POST", "/al/api/rollouts/b/attempt/0/events", `{"event_type":"reward","data":{"value":1}}`, 401},
		{"GET", "/al/api/rollouts/a/events", "", 200},
		{"GET", "/al/api/rollouts/a/events?format=triplet", "", 200},
		{"GET", "/al/api/rollouts/a", "", 200},
		{"GET", "/al/api/rollouts/b", "", 401},
		{"GET", "/al/api/rollouts/b/events", "", 401},
		{"GET", "/al/api/rollouts?state_in=running", "", 401},
		{"PATCH", "/al/api/rollouts/a", `{"status":{"state":"failed"}}`, 401},
		{"DELETE", "/al/api/rollouts/a", "", 401},
		{"POST", "/al/api/rollouts/a/attempt/0/events", `{"event_type":"tests","data":{}}`, 403},
		{"POST", "/al/api/rollouts/a/attempt/0/events", `{"event_type":"my_custom","data":{"k":1}}`, 200},
		{"POST", "/al/api/rollouts/a/attempt/0/events", `{"event_type":"log","data":{"msg":"hi"}}`, 200},
		{"POST", "/al/api/rollouts", `[{"input":1}]`, 401},
		{"POST", "/al/proxy/pause", `{}`, 401},
		{"DELETE", "/al/api/models", "", 401},
		{"GET", "/al/healthz", "", 200},
	}
	for _, c := range cases {
		if r := e.do(t, c.method, c.path, c.body, k); r.status != c.status {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, r.status, r.body, c.status)
		}
	}
	var evs []map[string]any
	e.admin(t, "GET", "/al/api/rollouts/a/events?event_type=reward", "").json(t, &evs)
	if len(evs) != 1 || evs[0]["attempt_id"] != "0" || evs[0]["data"].(map[string]any)["source"] != "agent" {
		t.Fatalf("events %v", evs)
	}
	// The controller's events are not the agent's to read.
	if _, err := e.st.AppendEvents(context.Background(), "a", aids[0], []store.NewEvent{{Type: "tests", Data: json.RawMessage(`{"hidden":true}`)}}); err != nil {
		t.Fatal(err)
	}
	var mine, all []map[string]any
	e.do(t, "GET", "/al/api/rollouts/a/events", "", k).json(t, &mine)
	e.admin(t, "GET", "/al/api/rollouts/a/events", "").json(t, &all)
	if len(mine) != 3 || len(all) != 4 {
		t.Fatalf("the agent reads %d events, the admin %d; want 3 and 4 (tests hidden from the agent)", len(mine), len(all))
	}
}

// TestTripletDedup is AL's test_triplet_events_keep_last_model_request_for_duplicate_prompt:
// model_request events an admin posts in AL's shape, trimmed, the last of
// identical prompt ids kept at its own position.
func TestTripletDedup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, al.Config{}, false)
	e.started(t, "r")
	post := func(body string) {
		if r := e.admin(t, "POST", "/al/api/rollouts/r/attempt/0/events", body); r.status != 200 {
			t.Fatalf("post: %d %s", r.status, r.body)
		}
	}
	mr := func(prompt, resp string) string {
		return `{"event_type":"model_request","data":{"response":{"prompt_token_ids":` + prompt + `,"choices":[{"token_ids":` + resp + `}]},"server":{"model":"m","version":3}}}`
	}
	post(mr("[1,2]", "[10]"))
	post(`{"event_type":"reward","data":{"value":0.5}}`)
	post(mr("[3,4]", "[20]"))
	post(mr("[1,2]", "[30]"))
	var raw []map[string]any
	e.admin(t, "GET", "/al/api/rollouts/r/events?event_type=model_request", "").json(t, &raw)
	if len(raw) != 3 {
		t.Fatalf("raw %v", raw)
	}
	var trip []struct {
		EventType string         `json:"event_type"`
		Data      map[string]any `json:"data"`
	}
	e.admin(t, "GET", "/al/api/rollouts/r/events?format=triplet", "").json(t, &trip)
	var got []string
	for _, ev := range trip {
		b, _ := json.Marshal(ev.Data)
		got = append(got, ev.EventType+" "+string(b))
	}
	want := []string{
		`reward {"value":0.5}`,
		`model_request {"prompt_token_ids":[3,4],"response_log_probs":null,"response_token_ids":[20],"server":{"model":"m","version":3}}`,
		`model_request {"prompt_token_ids":[1,2],"response_log_probs":null,"response_token_ids":[30],"server":{"model":"m","version":3}}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("triplets\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRollouts: AL's rollout routes on agl's store — validation (422),
// idempotent create, state_in, PATCH transitions (409), soft and purging
// deletes, the terminal cursor.
func TestRollouts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, al.Config{}, false)
	steps := []struct {
		name, method, path, body string
		status                   int
		has                      string // in the body
	}{
		{"missing input", "POST", "/al/api/rollouts", `[{"is_train":true}]`, 422, `"loc":["body",0,"input"]`},
		{"not a list", "POST", "/al/api/rollouts", `{"input":1}`, 422, `"detail"`},
		{"reserved metadata", "POST", "/al/api/rollouts", `[{"input":1,"metadata":{"_al":1}}]`, 422, `reserved`},
		{"bad id", "POST", "/al/api/rollouts", `[{"input":1,"rollout_id":"a b"}]`, 422, `"detail"`},
		{"create", "POST", "/al/api/rollouts", `[{"input":{"instance_id":"i-1"},"is_train":false,"metadata":{"batch_idx":3,"extra":"x"},"rollout_id":"x1"},{"input":2,"rollout_id":"x2"},{"input":3,"rollout_id":"x3"}]`, 201,
			`"config":{"timeout_seconds":3600,"local":null,"k8s":null},"metadata":{"batch_idx":3,"extra":"x","sample_idx_in_batch":null},"status":{"state":"queuing","k8s_job_name":null,"last_attempt_id":null,"error_message":null,"version":1`},
		{"create again", "POST", "/al/api/rollouts", `[{"input":"changed","rollout_id":"x1"}]`, 201, `"input":{"instance_id":"i-1"}`},
		{"generated id", "POST", "/al/api/rollouts", `[{"input":3}]`, 201, `"rollout_id":"`},
		{"state_in required", "GET", "/al/api/rollouts", "", 422, `"loc":["query","state_in"]`},
		{"state_in bad", "GET", "/al/api/rollouts?state_in=done", "", 422, `state_in`},
		{"list queuing", "GET", "/al/api/rollouts?state_in=queuing&limit=2", "", 200, `"rollout_id":"x2"`},
		{"get", "GET", "/al/api/rollouts/x1", "", 200, `{"rollout":{"rollout_id":"x1"`},
		{"get unknown", "GET", "/al/api/rollouts/nope", "", 404, `{"detail":"Rollout not found: nope"}`},
		{"patch extra field", "PATCH", "/al/api/rollouts/x1", `{"status":{"state":"failed","bogus":1}}`, 422, `"detail"`},
		{"patch nothing", "PATCH", "/al/api/rollouts/x1", `{}`, 200, `"state":"queuing"`},
		{"patch queuing->succeeded", "PATCH", "/al/api/rollouts/x1", `{"status":{"state":"succeeded"}}`, 409, `Rollout x1: cannot transition queuing -> succeeded`},
		{"patch queuing->running (an external controller)", "PATCH", "/al/api/rollouts/x3", `{"status":{"state":"running","k8s_job_name":"job-x3","last_attempt_id":"0"}}`, 200,
			`"status":{"state":"running","k8s_job_name":"job-x3","last_attempt_id":"0","error_message":null,"version":2,`},
		{"patch running->running", "PATCH", "/al/api/rollouts/x3", `{"status":{"state":"running"}}`, 409, `Rollout x3: cannot transition running -> running`},
		{"fields kept", "GET", "/al/api/rollouts/x3", "", 200, `"k8s_job_name":"job-x3","last_attempt_id":"0"`},
		{"patch queuing->failed", "PATCH", "/al/api/rollouts/x1", `{"status":{"state":"failed","error_message":"bad input"}}`, 200, `"state":"failed","k8s_job_name":null,"last_attempt_id":null,"error_message":"bad input","version":2`},
		{"patch failed->running", "PATCH", "/al/api/rollouts/x1", `{"status":{"state":"running"}}`, 409, `cannot transition failed -> running`},
		{"terminal", "GET", "/al/api/rollouts/terminal", "", 200, `{"items":[{"rollout_id":"x1","state":"failed","data_id":"i-1","is_train":false}],"next_after":1,"total_terminal":1}`},
		{"terminal after", "GET", "/al/api/rollouts/terminal?after=1", "", 200, `{"items":[],"next_after":1,"total_terminal":1}`},
		{"delete live", "DELETE", "/al/api/rollouts/x2", "", 204, ``},
		{"deleted is gone", "GET", "/al/api/rollouts/x2", "", 404, `Rollout not found: x2`},
		{"delete unknown", "DELETE", "/al/api/rollouts/nope", "", 204, ``},
		{"delete terminal", "DELETE", "/al/api/rollouts/x1", "", 204, ``},
		{"deleted not listed", "GET", "/al/api/rollouts?state_in=failed", "", 200, `[]`},
		{"events of deleted", "GET", "/al/api/rollouts/x1/events", "", 404, `Rollout not found: x1`},
		{"delete with purge", "DELETE", "/al/api/rollouts/x1?purge=true", "", 204, ``},
		{"unknown route", "GET", "/al/api/nothing", "", 404, `{"detail":"Not Found"}`},
		{"wrong method", "PUT", "/al/api/models", "", 405, `{"detail":"Method Not Allowed"}`},
		{"wrong method on a pattern", "GET", "/al/proxy/pause", "", 405, `{"detail":"Method Not Allowed"}`},
	}
	for _, s := range steps {
		r := e.admin(t, s.method, s.path, s.body)
		if r.status != s.status || !strings.Contains(r.body, s.has) {
			t.Fatalf("%s: %d %s, want %d with %s", s.name, r.status, r.body, s.status, s.has)
		}
	}
	ctx := context.Background()
	// Soft delete keeps agl's data; purge removes it.
	if ro, err := e.st.GetRollout(ctx, "x2"); err != nil || ro.Status != store.RolloutCancelled {
		t.Fatalf("soft-deleted x2 in agl: %+v %v", ro, err)
	}
	if _, err := e.st.GetRollout(ctx, "x1"); err == nil {
		t.Fatal("x1, which never ran, is still in the store")
	}
	// The AL rollout as agl stores it: task, mode, timeout, metadata with AL's config.
	ro, err := e.st.GetRollout(ctx, "x2")
	if err != nil {
		t.Fatal(err)
	}
	if string(ro.Task) != "2" || ro.Mode != store.ModeTrain || ro.Config.TimeoutSeconds != 3600 || !bytes.Contains(ro.Metadata, []byte(`"_al":{"config":{"timeout_seconds":3600`)) {
		t.Fatalf("stored %+v %s", ro, ro.Metadata)
	}
}

// TestRunningPatchAndLateEvents: a rollout agl's controller runs is not
// ended by an external controller's PATCH; an admin's event to the terminal rollout is kept (a hook's);
// the attempt's key can no longer post once it is revoked.
func TestRunningPatchAndLateEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, al.Config{}, false)
	keys, aids := e.started(t, "r")
	var ro map[string]any
	e.admin(t, "GET", "/al/api/rollouts/r", "").json(t, &ro)
	if st := ro["rollout"].(map[string]any)["status"].(map[string]any); st["state"] != "running" || st["last_attempt_id"] != "0" || st["version"] != 2.0 {
		t.Fatalf("claimed rollout %v", st)
	}
	// agl's controller runs r: an external controller's PATCH may not end it.
	for _, b := range []string{`{"status":{"state":"succeeded","last_attempt_id":"0"}}`, `{"status":{"state":"failed","error_message":"local subprocess is not running"}}`, `{"status":{"k8s_job_name":"j"}}`} {
		if r := e.admin(t, "PATCH", "/al/api/rollouts/r", b); r.status != 409 || !strings.Contains(r.body, "run by agl's controller") {
			t.Fatalf("patch %s of agl's rollout: %d %s", b, r.status, r.body)
		}
	}
	if _, err := e.st.CompleteAttempt(context.Background(), "r", aids[0], store.AttemptSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	if err := e.st.RevokeKey(context.Background(), "r", aids[0]); err != nil {
		t.Fatal(err)
	}
	if r := e.do(t, "POST", "/al/api/rollouts/r/attempt/0/events", `{"event_type":"reward","data":{"value":1}}`, "Authorization: Bearer "+keys[0]); r.status != 401 {
		t.Fatalf("revoked key posted: %d %s", r.status, r.body)
	}
	r := e.admin(t, "POST", "/al/api/rollouts/r/attempt/0/events", `{"event_type":"reward","data":{"value":0.25,"reason":"hook"}}`)
	if r.status != 200 || !strings.Contains(r.body, `"event_type":"reward","rollout_id":"r","attempt_id":"0"`) {
		t.Fatalf("late event: %d %s", r.status, r.body)
	}
	var trip []map[string]any
	e.admin(t, "GET", "/al/api/rollouts/r/events?format=triplet", "").json(t, &trip)
	if len(trip) != 1 || trip[0]["data"].(map[string]any)["value"] != 0.25 || trip[0]["data"].(map[string]any)["reason"] != "hook" {
		t.Fatalf("triplets %v", trip)
	}
	// A soft delete keeps the rollout and its events; ?purge=true removes them.
	for _, q := range []string{"", "?purge=true"} {
		if r := e.admin(t, "DELETE", "/al/api/rollouts/r"+q, ""); r.status != 204 {
			t.Fatalf("delete%s: %d %s", q, r.status, r.body)
		}
		evs, err := e.st.ListEvents(context.Background(), store.EventFilter{RolloutID: "r"})
		if kept := err == nil && len(evs) > 0; kept != (q == "") {
			t.Fatalf("delete%s: events %v %v", q, evs, err)
		}
	}
	_, aids2 := e.started(t, "r2")
	for _, c := range []struct{ body, has string }{
		{`{"data":{}}`, `"loc":["body","event_type"]`},
		{`{"event_type":"x","data":[1]}`, `"loc":["body","data"]`},
		{`{"event_type":"reward","data":{"value":1e308}}`, `out of range`},
	} {
		if r := e.admin(t, "POST", "/al/api/rollouts/r2/attempt/0/events", c.body); r.status != 422 || !strings.Contains(r.body, c.has) {
			t.Fatalf("%s: %d %s", c.body, r.status, r.body)
		}
	}
	// A reward AL keeps whatever its value: a boolean posted by a hook to
	// a finished rollout, a string from the agent; kept as posted, counted
	// by neither agl's summary nor AL's trainer.
	if _, err := e.st.CompleteAttempt(context.Background(), "r2", aids2[0], store.AttemptSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	if r := e.admin(t, "POST", "/al/api/rollouts/r2/attempt/0/events", `{"event_type":"reward","data":{"value":true}}`); r.status != 200 || !strings.Contains(r.body, `"value":true`) {
		t.Fatalf("boolean reward on a finished rollout: %d %s", r.status, r.body)
	}
	keys2, aids3 := e.started(t, "r3")
	if r := e.do(t, "POST", "/al/api/rollouts/r3/attempt/0/events", `{"event_type":"reward","data":{"value":"high"}}`, "Authorization: Bearer "+keys2[0]); r.status != 200 {
		t.Fatalf("string reward from the agent: %d %s", r.status, r.body)
	}
	var kept []map[string]any
	e.admin(t, "GET", "/al/api/rollouts/r3/events?format=triplet", "").json(t, &kept)
	if len(kept) != 1 || kept[0]["data"].(map[string]any)["value"] != "high" {
		t.Fatalf("string reward kept: %v", kept)
	}
	if ro, err := e.st.CompleteAttempt(context.Background(), "r3", aids3[0], store.AttemptSucceeded, ""); err != nil || ro.Reward != nil {
		t.Fatalf("a string reward counted in agl's summary: %+v %v", ro.Reward, err)
	}
}

// TestModels: AL's (model, endpoint) upserts land in agl's model registry
// (a new version only when something changed); DELETE leaves each model a
// version without endpoints.
func TestModels(t *testing.T) {
	t.Parallel()
	e := newEnv(t, al.Config{}, false)
	ctx := context.Background()
	steps := []struct {
		body     string
		status   int
		versions int64
		eps      string
	}{
		{`[{"model":"q","endpoint":"http://a/v1"}]`, 201, 1, "http://a/v1"},
		{`[{"model":"q","endpoint":"http://a/v1","version":0}]`, 201, 1, "http://a/v1"},
		{`[{"model":"q","endpoint":"http://b/v1"},{"model":"q","endpoint":"http://a/v1"}]`, 201, 2, "http://a/v1 http://b/v1"},
		{`[{"model":"q","endpoint":"http://b/v1","version":9}]`, 201, 9, "http://a/v1 http://b/v1"},
		{`[{"model":"q"}]`, 422, 9, "http://a/v1 http://b/v1"},
		{`DELETE`, 200, 10, ""},
	}
	for i, s := range steps {
		var r resp
		if s.body == "DELETE" {
			r = e.admin(t, "DELETE", "/al/api/models", "")
		} else {
			r = e.admin(t, "POST", "/al/api/models", s.body)
		}
		if r.status != s.status {
			t.Fatalf("step %d: %d %s", i, r.status, r.body)
		}
		ms, err := e.st.ListModels(ctx, "q")
		if err != nil || len(ms) == 0 {
			t.Fatal(err)
		}
		if ms[0].Version != s.versions || strings.Join(ms[0].Endpoints, " ") != s.eps {
			t.Fatalf("step %d: latest %+v, want version %d endpoints %q", i, ms[0], s.versions, s.eps)
		}
	}
}

// TestPostedEventBytesBounded: an event posted on /al whose data is over
// the stored-bytes bound (default 8 MiB, measured as JSON) is refused 413
// in /al's {"detail": …} shape and not recorded; the attempt goes on.
func TestPostedEventBytesBounded(t *testing.T) {
	e := newEnv(t, al.Config{}, false)
	e.started(t, "r")
	big := `{"event_type":"log","data":{"junk":"` + strings.Repeat("x", api.DefaultMaxStoredCallBytes) + `"}}`
	r := e.admin(t, "POST", "/al/api/rollouts/r/attempt/0/events", big)
	if r.status != http.StatusRequestEntityTooLarge || !strings.Contains(r.body, `"detail"`) || !strings.Contains(r.body, "max_stored_call_bytes") {
		t.Fatalf("event over the bound: %d %.300s", r.status, r.body)
	}
	if r := e.admin(t, "POST", "/al/api/rollouts/r/attempt/0/events", `{"event_type":"log","data":{"junk":"`+strings.Repeat("x", 1<<20)+`"}}`); r.status != 200 {
		t.Fatalf("event under the bound after the refusal: %d %.300s", r.status, r.body)
	}
	var evs []map[string]any
	e.admin(t, "GET", "/al/api/rollouts/r/events?event_type=log", "").json(t, &evs)
	if len(evs) != 1 {
		t.Fatalf("%d log events stored, want 1 (the refused one not stored)", len(evs))
	}
}

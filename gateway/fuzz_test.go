package gateway_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"unicode/utf8"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/gateway"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/store"
)

// The fuzz targets below post arbitrary bodies to one store API route of a
// gateway over a real SQLite store. Whatever the body, the gateway must
// not crash, must answer below 500 (the store never fails here), must
// answer the route's JSON or the {"error":{"code","message"}} shape, and
// everything it stored must still read back through the API as valid
// UTF-8 JSON. Run one with, e.g.:
//
//	go test -run '^$' -fuzz '^FuzzCreateRollouts$' -fuzztime 30s ./gateway/
//
// scripts/fuzz.sh runs each for a short fixed time in CI.

type fuzzAPI struct {
	h  http.Handler
	st store.Store
	n  int
}

func newFuzzAPI(f *testing.F, seeds ...string) *fuzzAPI {
	st := testutil.SQLite(f)
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	return &fuzzAPI{h: gateway.New(gateway.Options{Store: st, AdminKey: admin, MaxBodyBytes: 1 << 16, ReapInterval: -1}), st: st}
}

func (fa *fuzzAPI) do(t *testing.T, method, path, key string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	w := httptest.NewRecorder()
	fa.h.ServeHTTP(w, req)
	return w
}

// running creates and claims a fresh rollout.
func (fa *fuzzAPI) running(t *testing.T) store.Claim {
	fa.n++
	c := ctx(t)
	if _, err := fa.st.CreateRollouts(c, []store.NewRollout{{ID: fmt.Sprintf("fz%d", fa.n)}}); err != nil {
		t.Fatal(err)
	}
	cl, err := fa.st.Claim(c, store.ClaimRequest{WorkerID: "fuzz"})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// post sends body and checks the answer; reads lists the routes whose
// answers must still parse afterwards.
func (fa *fuzzAPI) post(t *testing.T, path, key string, body []byte, reads ...string) {
	w := fa.do(t, "POST", path, key, body)
	out := w.Body.Bytes()
	if w.Code >= 500 {
		t.Fatalf("%q: status %d: %s", body, w.Code, out)
	}
	if w.Code == http.StatusNoContent {
		return
	}
	if !json.Valid(out) || !utf8.Valid(out) {
		t.Fatalf("%q: status %d, answer is not UTF-8 JSON: %q", body, w.Code, out)
	}
	if w.Code >= 400 {
		var e api.ErrorBody
		if json.Unmarshal(out, &e) != nil || e.Error.Code == "" || e.Error.Message == "" {
			t.Fatalf("%q: %d is not the JSON error shape: %s", body, w.Code, out)
		}
		return
	}
	for _, r := range reads {
		rw := fa.do(t, "GET", r, admin, nil)
		if rw.Code != 200 || !json.Valid(rw.Body.Bytes()) || !utf8.Valid(rw.Body.Bytes()) {
			t.Fatalf("after %q: GET %s: %d %q", body, r, rw.Code, rw.Body.Bytes())
		}
	}
}

func FuzzCreateRollouts(f *testing.F) {
	fa := newFuzzAPI(f,
		`{"rollouts":[{"id":"a","group_id":"g","task":{"q":"2+2"},"mode":"train","metadata":{"step":3},"config":{"max_attempts":2,"timeout_seconds":10}}]}`,
		`{"rollouts":[{"task":"x"},{"task":[1,2],"mode":"val"}]}`,
		`{"rollouts":[{"id":"a/b"}]}`, `{"rollouts":[{"id":".."}]}`, `{"rollouts":[]}`, `{"rollouts":[{"step":-1}]}`,
		`{"rollouts":[{"config":{"max_attempts":"3"}}]}`, `{"rollouts": [{}]} {}`, `{"rollouts":[{"task":{"q":"\u00e9"}}]}`)
	f.Fuzz(func(t *testing.T, body []byte) {
		fa.post(t, "/api/rollouts", admin, body, "/api/rollouts?limit=1000", "/api/rollouts?order=desc&limit=1000")
	})
}

func FuzzClaim(f *testing.F) {
	fa := newFuzzAPI(f, `{"worker_id":"w1"}`, `{"worker_id":"w","mode":"val"}`, `{"mode":"test"}`, `{}`, ``, `{"worker_id":5}`)
	f.Fuzz(func(t *testing.T, body []byte) {
		fa.n++
		if _, err := fa.st.CreateRollouts(ctx(t), []store.NewRollout{{ID: fmt.Sprintf("q%d", fa.n)}}); err != nil {
			t.Fatal(err)
		}
		fa.post(t, "/api/claim", admin, body, "/api/rollouts?limit=1000")
	})
}

func FuzzAppendEvents(f *testing.F) {
	fa := newFuzzAPI(f,
		`{"events":[{"type":"reward","data":{"value":1}}]}`,
		`{"events":[{"type":"log","data":"hi","time":"2025-01-01T00:00:00Z"},{"type":"note","data":{"k":[1,null]}}]}`,
		`{"events":[]}`, `{"events":[{"type":""}]}`, `{"events":[{"type":"log","time":"soon"}]}`, `{"events":null}`)
	var cl store.Claim
	f.Fuzz(func(t *testing.T, body []byte) {
		if cl.Key == "" || fa.n%50 == 0 {
			cl = fa.running(t)
		}
		fa.n++
		base := "/api/rollouts/" + cl.Rollout.ID
		fa.post(t, base+"/attempts/"+cl.Attempt.ID+"/events", cl.Key, body, base+"/events?limit=1000")
	})
}

func FuzzComplete(f *testing.F) {
	fa := newFuzzAPI(f, `{"status":"succeeded"}`, `{"status":"failed","error":"boom"}`, `{"status":"timeout"}`, `{}`, `{"status":1}`)
	f.Fuzz(func(t *testing.T, body []byte) {
		cl := fa.running(t)
		fa.post(t, "/api/rollouts/"+cl.Rollout.ID+"/attempts/"+cl.Attempt.ID+"/complete", admin, body, "/api/rollouts/"+cl.Rollout.ID, "/api/terminal")
	})
}

func FuzzRegisterModel(f *testing.F) {
	fa := newFuzzAPI(f,
		`{"name":"m","weights":"/w/1","endpoints":["http://a"],"metadata":{"k":1}}`, `{"name":"m","version":7}`,
		`{"version":1}`, `{"name":"m","version":9223372036854775807}`, `{"name":"m","version":9223372036854775808}`, `{"name":"m","version":-1}`)
	f.Fuzz(func(t *testing.T, body []byte) {
		fa.post(t, "/api/models", admin, body, "/api/models")
	})
}

func FuzzTrainSteps(f *testing.F) {
	fa := newFuzzAPI(f,
		`{"run":"r","mode":"train","step":1,"time":"2025-01-01T00:00:00Z","metrics":{"reward_mean":0.5,"loss":1e-3}}`,
		`{"run":"r","mode":"val","step":0,"metrics":{}}`, `{"run":"r","mode":"train","step":1,"metrics":[1]}`, `{"mode":"train"}`)
	f.Fuzz(func(t *testing.T, body []byte) {
		fa.post(t, "/api/train/steps", admin, body, "/api/train/steps")
	})
}

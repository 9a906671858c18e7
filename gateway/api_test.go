package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/gateway"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/store"
)

const admin = "test-admin-key"

func newServer(t *testing.T, opt gateway.Options) (*httptest.Server, store.Store) {
	t.Helper()
	if opt.Store == nil {
		opt.Store = testutil.SQLite(t)
	}
	if opt.AdminKey == "" {
		opt.AdminKey = admin
	}
	srv := httptest.NewServer(gateway.New(opt))
	t.Cleanup(srv.Close)
	return srv, opt.Store
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func statusOf(err error) int {
	var e *api.Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

func TestScopedKeys(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, gateway.Options{})
	c := ctx(t)
	adm := api.NewClient(srv.URL, admin)
	if _, err := adm.CreateRollouts(c, []store.NewRollout{{ID: "a"}, {ID: "b"}}); err != nil {
		t.Fatal(err)
	}
	ca, _, err := adm.Claim(c, store.ClaimRequest{WorkerID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	cb, _, err := adm.Claim(c, store.ClaimRequest{WorkerID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	ka := api.NewClient(srv.URL, ca.Key)
	// Its own attempt: heartbeat, append, read.
	if _, err := ka.Heartbeat(c, "a", ca.Attempt.ID); err != nil {
		t.Fatalf("own heartbeat: %v", err)
	}
	if _, err := ka.AppendEvents(c, "a", ca.Attempt.ID, []store.NewEvent{{Type: store.EventReward, Data: json.RawMessage(`{"value":1}`)}}); err != nil {
		t.Fatalf("own append: %v", err)
	}
	if evs, err := ka.ListEvents(c, store.EventFilter{RolloutID: "a", AttemptID: ca.Attempt.ID}); err != nil || len(evs) != 1 {
		t.Fatalf("own read: %v %v", evs, err)
	}
	// Anything else: refused.
	cases := []struct {
		name string
		call func() error
		want int
	}{
		{"append other rollout", func() error {
			_, err := ka.AppendEvents(c, "b", cb.Attempt.ID, []store.NewEvent{{Type: "log"}})
			return err
		}, 403},
		{"append other attempt id under own rollout", func() error {
			_, err := ka.AppendEvents(c, "a", cb.Attempt.ID, []store.NewEvent{{Type: "log"}})
			return err
		}, 403},
		{"heartbeat other", func() error { _, err := ka.Heartbeat(c, "b", cb.Attempt.ID); return err }, 403},
		{"read other events", func() error {
			_, err := ka.ListEvents(c, store.EventFilter{RolloutID: "b", AttemptID: cb.Attempt.ID})
			return err
		}, 403},
		{"read own events without attempt", func() error { _, err := ka.ListEvents(c, store.EventFilter{RolloutID: "a"}); return err }, 403},
		{"complete own attempt", func() error { _, err := ka.Complete(c, "a", ca.Attempt.ID, store.AttemptSucceeded, ""); return err }, 403},
		{"list rollouts", func() error { _, err := ka.ListRollouts(c, store.RolloutFilter{}); return err }, 403},
		{"get rollout", func() error { _, err := ka.GetRollout(c, "a"); return err }, 403},
		{"claim", func() error { _, _, err := ka.Claim(c, store.ClaimRequest{}); return err }, 403},
		{"models", func() error { _, err := ka.RegisterModel(c, store.Model{Name: "x"}); return err }, 403},
		{"no key", func() error { _, err := api.NewClient(srv.URL, "").ListRollouts(c, store.RolloutFilter{}); return err }, 401},
		{"wrong admin key", func() error {
			_, err := api.NewClient(srv.URL, "nope").ListRollouts(c, store.RolloutFilter{})
			return err
		}, 401},
		{"forged scoped key", func() error {
			_, err := api.NewClient(srv.URL, store.KeyPrefix+"forged").Heartbeat(c, "a", ca.Attempt.ID)
			return err
		}, 403},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := statusOf(tc.call()); got != tc.want {
				t.Errorf("status %d, want %d", got, tc.want)
			}
		})
	}
	// The refused calls stored nothing.
	if evs, _ := adm.ListEvents(c, store.EventFilter{RolloutID: "b"}); len(evs) != 0 {
		t.Errorf("rollout b has %d events", len(evs))
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	srv, st := newServer(t, gateway.Options{MaxBodyBytes: 1 << 10})
	c := ctx(t)
	st.CreateRollouts(c, []store.NewRollout{{ID: "r"}, {ID: "done"}})
	cl, _ := st.Claim(c, store.ClaimRequest{})
	cd, _ := st.Claim(c, store.ClaimRequest{})
	st.AppendEvents(c, "r", cl.Attempt.ID, []store.NewEvent{{Type: "log", Data: json.RawMessage(`"keep me"`)}})
	st.CompleteAttempt(c, "done", cd.Attempt.ID, store.AttemptSucceeded, "")
	ev := "/api/rollouts/r/attempts/" + cl.Attempt.ID + "/events"
	cases := []struct {
		name, method, path, body string
		status                   int
		code, mention            string
	}{
		{"malformed json", "POST", "/api/rollouts", `{"rollouts": [`, 400, "invalid_json", "truncated"},
		{"syntax error", "POST", "/api/rollouts", `{"rollouts": [}`, 400, "invalid_json", "malformed JSON"},
		{"empty body", "POST", "/api/rollouts", ``, 400, "invalid_json", "empty"},
		{"wrong type", "POST", "/api/rollouts", `{"rollouts": "x"}`, 400, "invalid_request", "rollouts"},
		{"nested wrong type", "POST", "/api/rollouts", `{"rollouts": [{"config": {"max_attempts": "3"}}]}`, 400, "invalid_request", "max_attempts"},
		{"unknown field", "POST", "/api/rollouts", `{"rollouts": [], "extra": 1}`, 400, "invalid_request", "extra"},
		{"trailing data", "POST", "/api/rollouts", `{"rollouts": [{}]} {}`, 400, "invalid_json", "after"},
		{"empty batch", "POST", "/api/rollouts", `{"rollouts": []}`, 400, "invalid_request", "empty"},
		{"bad mode", "POST", "/api/rollouts", `{"rollouts": [{"mode": "test"}]}`, 400, "invalid_request", "mode"},
		{"id outside the alphabet", "POST", "/api/rollouts", `{"rollouts": [{"id": "a/b"}]}`, 400, "invalid_request", "rollout id"},
		{"group id outside the alphabet", "POST", "/api/rollouts", `{"rollouts": [{"id": "g", "group_id": "x y"}]}`, 400, "invalid_request", "group_id"},
		{"task not UTF-8", "POST", "/api/rollouts", "{\"rollouts\": [{\"id\": \"u\", \"task\": {\"q\": \"\xff\"}}]}", 400, "invalid_request", "task"},
		{"event data not UTF-8", "POST", ev, "{\"events\": [{\"type\": \"log\", \"data\": \"\xc3\"}]}", 400, "invalid_request", "UTF-8"},
		{"bad task json", "POST", ev, `{"events": [{"type": ""}]}`, 400, "invalid_request", "type"},
		{"oversized", "POST", ev, `{"events": [{"type": "log", "data": "` + strings.Repeat("x", 2000) + `"}]}`, 413, "too_large", "1024"},
		{"unknown rollout", "GET", "/api/rollouts/nope", ``, 404, "not_found", "nope"},
		{"unknown attempt", "POST", "/api/rollouts/r/attempts/nope/heartbeat", `{}`, 404, "not_found", "nope"},
		{"complete done attempt", "POST", "/api/rollouts/done/attempts/" + cd.Attempt.ID + "/complete", `{"status":"failed"}`, 409, "conflict", "succeeded"},
		{"complete as timeout", "POST", "/api/rollouts/r/attempts/" + cl.Attempt.ID + "/complete", `{"status":"timeout"}`, 400, "invalid_request", "timeout"},
		{"append to ended attempt", "POST", "/api/rollouts/done/attempts/" + cd.Attempt.ID + "/events", `{"events":[{"type":"log"}]}`, 409, "conflict", "not running"},
		{"cancel terminal", "POST", "/api/rollouts/done/cancel", ``, 409, "conflict", "already"},
		{"bad status filter", "GET", "/api/rollouts?status=bogus", ``, 400, "invalid_request", "bogus"},
		{"bad cursor", "GET", "/api/rollouts?cursor=-1", ``, 400, "invalid_request", "cursor"},
		{"bad reward bound", "GET", "/api/rollouts?min_reward=high", ``, 400, "invalid_request", "min_reward"},
		{"bad step filter", "GET", "/api/rollouts?step=x", ``, 400, "invalid_request", "step"},
		{"NaN reward bound", "GET", "/api/rollouts?min_reward=NaN", ``, 400, "invalid_request", "min_reward"},
		{"infinite reward bound", "GET", "/api/rollouts?max_reward=Inf", ``, 400, "invalid_request", "max_reward"},
		{"minus infinite reward bound", "GET", "/api/rollouts?min_reward=-Inf", ``, 400, "invalid_request", "min_reward"},
		{"model version past int64", "POST", "/api/models", `{"name": "m", "version": 9223372036854775808}`, 400, "invalid_request", "version"},
		{"model without name", "POST", "/api/models", `{"version": 1}`, 400, "invalid_request", "name"},
		{"train step without run", "POST", "/api/train/steps", `{"mode":"train","step":1,"metrics":{}}`, 400, "invalid_request", "run"},
		{"train step metrics not an object", "POST", "/api/train/steps", `{"run":"r","mode":"train","step":1,"metrics":[1]}`, 400, "invalid_request", "metrics"},
		{"train step unknown field", "POST", "/api/train/steps", `{"run":"r","mode":"train","step":1,"metrics":{},"x":1}`, 400, "invalid_request", "x"},
		{"no route", "GET", "/api/nothing", ``, 404, "no_route", "/api/nothing"},
		{"wrong method", "GET", "/api/claim", ``, 404, "no_route", "GET /api/claim"},
		{"llm without engine", "POST", "/r/r/a/v1/chat/completions", `{}`, 404, "no_engine", "engine"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer "+admin)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body api.ErrorBody
			raw, _ := io.ReadAll(resp.Body)
			if err := json.Unmarshal(raw, &body); err != nil {
				t.Fatalf("not a JSON error: %q", raw)
			}
			if resp.StatusCode != tc.status || body.Error.Code != tc.code || !strings.Contains(body.Error.Message, tc.mention) {
				t.Errorf("got %d %s %q, want %d %s mentioning %q", resp.StatusCode, body.Error.Code, body.Error.Message, tc.status, tc.code, tc.mention)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("content type %q", ct)
			}
		})
	}
	// Nothing already stored was lost or changed.
	evs, _ := st.ListEvents(c, store.EventFilter{RolloutID: "r"})
	if len(evs) != 1 || string(evs[0].Data) != `"keep me"` {
		t.Errorf("events after bad input: %+v", evs)
	}
	if rs, _, _ := st.ListRollouts(c, store.RolloutFilter{}); len(rs) != 2 {
		t.Errorf("%d rollouts after bad input, want 2", len(rs))
	}
}

// TestTrainStepsAndStepFilter: a trainer in another process reports its
// steps over HTTP; rollouts list by step.
func TestTrainStepsAndStepFilter(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, gateway.Options{})
	c := ctx(t)
	adm := api.NewClient(srv.URL, admin)
	for _, st := range []store.TrainStep{
		{Run: "run", Mode: store.ModeTrain, Step: 1, Metrics: json.RawMessage(`{"reward_mean":0.5}`)},
		{Run: "run", Mode: store.ModeVal, Step: 1, Metrics: json.RawMessage(`{"reward_mean":0.25}`)},
	} {
		if err := adm.PutTrainStep(c, st); err != nil {
			t.Fatal(err)
		}
	}
	steps, err := adm.ListTrainSteps(c, "run")
	if err != nil || len(steps) != 2 || steps[0].Mode != store.ModeTrain || steps[1].Mode != store.ModeVal {
		t.Fatalf("steps %+v, %v", steps, err)
	}
	if other, err := adm.ListTrainSteps(c, "other"); err != nil || len(other) != 0 {
		t.Fatalf("other run: %+v, %v", other, err)
	}
	if _, err := adm.CreateRollouts(c, []store.NewRollout{{ID: "a", Metadata: json.RawMessage(`{"step":1}`)}, {ID: "b", Metadata: json.RawMessage(`{"step":2}`)}}); err != nil {
		t.Fatal(err)
	}
	two := int64(2)
	page, err := adm.ListRollouts(c, store.RolloutFilter{Step: &two})
	if err != nil || len(page.Rollouts) != 1 || page.Rollouts[0].ID != "b" {
		t.Fatalf("step 2: %+v, %v", page, err)
	}
	if _, err := api.NewClient(srv.URL, "").ListTrainSteps(c, ""); statusOf(err) != http.StatusUnauthorized {
		t.Fatalf("train steps without key: %v", err)
	}
}

// serve runs a Server on a real listener with its reaper.
func serve(t *testing.T, opt gateway.Options) (string, context.CancelFunc, func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gateway.New(opt).Serve(c, ln, 5*time.Second, nil) }()
	wait := sync.OnceValue(func() error { return <-done })
	t.Cleanup(func() { cancel(); wait() })
	return "http://" + ln.Addr().String(), cancel, wait
}

func TestReaperThroughGateway(t *testing.T) {
	st := testutil.SQLite(t)
	url, _, _ := serve(t, gateway.Options{Store: st, AdminKey: admin, ReapInterval: 50 * time.Millisecond})
	c := ctx(t)
	adm := api.NewClient(url, admin)
	adm.CreateRollouts(c, []store.NewRollout{{ID: "r", Config: store.RolloutConfig{MaxAttempts: 2, UnresponsiveSeconds: 0.3}}})
	waitStatus := func(want store.RolloutStatus) store.Rollout {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			r, err := adm.GetRollout(c, "r")
			if err != nil {
				t.Fatal(err)
			}
			if r.Status == want {
				return r
			}
		}
		t.Fatalf("rollout never became %s", want)
		return store.Rollout{}
	}
	// A heart-beating attempt survives well past the limit.
	cl, _, _ := adm.Claim(c, store.ClaimRequest{WorkerID: "w"})
	for i := 0; i < 8; i++ {
		time.Sleep(100 * time.Millisecond)
		if _, err := adm.Heartbeat(c, "r", cl.Attempt.ID); err != nil {
			t.Fatalf("heartbeat %d: %v", i, err)
		}
	}
	// Then it stops: unresponsive, requeued.
	r := waitStatus(store.RolloutRequeuing)
	if r.Attempts[0].Status != store.AttemptUnresponsive {
		t.Fatalf("attempt %+v", r.Attempts[0])
	}
	if _, err := adm.Heartbeat(c, "r", cl.Attempt.ID); statusOf(err) != 409 {
		t.Errorf("heartbeat of reaped attempt: %v", err)
	}
	adm.Claim(c, store.ClaimRequest{WorkerID: "w"})
	r = waitStatus(store.RolloutFailed)
	if !strings.Contains(r.Error, "unresponsive") || !strings.Contains(r.Error, "attempt 2 of 2") {
		t.Errorf("failure reason %q", r.Error)
	}
}

func TestTerminalLongPoll(t *testing.T) {
	st := testutil.SQLite(t)
	url, _, _ := serve(t, gateway.Options{Store: st, AdminKey: admin, ReapInterval: -1})
	c := ctx(t)
	adm := api.NewClient(url, admin)
	adm.CreateRollouts(c, []store.NewRollout{{ID: "r"}})
	cl, _, _ := adm.Claim(c, store.ClaimRequest{})
	got := make(chan []store.Rollout, 1)
	go func() {
		rs, _, err := adm.Terminal(c, 0, 10, 20*time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- rs
	}()
	time.Sleep(200 * time.Millisecond)
	select {
	case rs := <-got:
		t.Fatalf("long-poll returned early with %v", rs)
	default:
	}
	if _, err := adm.Complete(c, "r", cl.Attempt.ID, store.AttemptSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case rs := <-got:
		if len(rs) != 1 || rs[0].ID != "r" {
			t.Fatalf("long-poll got %v", rs)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("long-poll not woken by completion")
	}
	// Nothing new: a short wait returns empty with the same cursor.
	rs, next, err := adm.Terminal(c, 1, 10, 100*time.Millisecond)
	if err != nil || len(rs) != 0 || next != 1 {
		t.Errorf("empty poll: %v %d %v", rs, next, err)
	}
}

func TestRefusesOpenNonLoopback(t *testing.T) {
	t.Parallel()
	s := gateway.New(gateway.Options{Store: testutil.SQLite(t)})
	err := s.ListenAndServe(context.Background(), "0.0.0.0:0", time.Second, nil)
	if err == nil || !strings.Contains(err.Error(), "admin key") {
		t.Fatalf("err = %v", err)
	}
}

func TestShutdownDrainsInFlight(t *testing.T) {
	st := testutil.SQLite(t)
	url, cancel, done := serve(t, gateway.Options{Store: st, AdminKey: admin, ReapInterval: -1})
	c := ctx(t)
	adm := api.NewClient(url, admin)
	adm.CreateRollouts(c, []store.NewRollout{{ID: "r"}})
	res := make(chan error, 1)
	go func() {
		_, _, err := adm.Terminal(c, 0, 10, 3*time.Second)
		res <- err
	}()
	time.Sleep(200 * time.Millisecond)
	cancel()
	// The waiting request is answered (empty), not cut off.
	if err := <-res; err != nil {
		t.Fatalf("in-flight request during shutdown: %v", err)
	}
	if err := done(); err != nil {
		t.Fatalf("serve: %v", err)
	}
}

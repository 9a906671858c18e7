package metrics_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/metrics"
	"github.com/aglrl/agl/store"
)

// scrape GETs /metrics from srv and parses it with the Prometheus text parser.
func scrape(t *testing.T, srv *httptest.Server) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// value finds the sample of family name whose labels include want; for a
// histogram it returns the sample count, for a counter or gauge its value.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

func mustValue(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string, want float64) {
	t.Helper()
	got, ok := value(t, fams, name, labels)
	if !ok {
		t.Errorf("%s%v: missing", name, labels)
		return
	}
	if got != want {
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

func TestScrape(t *testing.T) {
	ctx := context.Background()
	m := metrics.New(metrics.Options{Runtime: true})
	st := testutil.ObservedSQLite(t, m)
	m.CountRollouts(st)

	// Three rollouts: one claimed (running) with two events appended, two queuing.
	if _, err := st.CreateRollouts(ctx, []store.NewRollout{
		{ID: "r1", Task: json.RawMessage(`{}`)},
		{ID: "r2", Task: json.RawMessage(`{}`)},
		{ID: "r3", Task: json.RawMessage(`{}`)},
	}); err != nil {
		t.Fatal(err)
	}
	cl, err := st.Claim(ctx, store.ClaimRequest{WorkerID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AppendEvents(ctx, cl.Rollout.ID, cl.Attempt.ID, []store.NewEvent{
		{Type: store.EventLog, Data: json.RawMessage(`{"msg":"a"}`)},
		{Type: store.EventLog, Data: json.RawMessage(`{"msg":"b"}`)},
		{Type: store.EventReward, Data: json.RawMessage(`{"value":1}`)},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Reap(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	m.Reaped(store.ReapResult{Unresponsive: 2, Requeued: 1, Failed: 1})

	m.ObserveCall("chat.completions", 200, 120*time.Millisecond, 100, 20)
	m.ObserveCall("chat.completions", 200, 80*time.Millisecond, 50, 5)
	m.ObserveCall("messages", 400, time.Millisecond, 0, 0)
	done := m.InFlight("responses")
	m.InFlight("responses")() // in and out again
	m.ObserveStep(3*time.Second, 0.75, 0.5)
	m.ObserveSpans(4, 1)

	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	fams := scrape(t, srv)

	tests := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"agl_model_calls_total", map[string]string{"api": "chat.completions", "status": "200"}, 2},
		{"agl_model_calls_total", map[string]string{"api": "messages", "status": "400"}, 1},
		{"agl_model_call_duration_seconds", map[string]string{"api": "chat.completions", "status": "200"}, 2},
		{"agl_tokens_total", map[string]string{"api": "chat.completions", "direction": "in"}, 150},
		{"agl_tokens_total", map[string]string{"api": "chat.completions", "direction": "out"}, 25},
		{"agl_model_calls_in_flight", map[string]string{"api": "responses"}, 1},
		{"agl_rollouts", map[string]string{"status": "running"}, 1},
		{"agl_rollouts", map[string]string{"status": "queuing"}, 2},
		{"agl_rollouts", map[string]string{"status": "succeeded"}, 0},
		{"agl_events_appended_total", map[string]string{"type": "log"}, 2},
		{"agl_events_appended_total", map[string]string{"type": "reward"}, 1},
		{"agl_reaper_passes_total", nil, 2},
		{"agl_reaper_actions_total", map[string]string{"action": "unresponsive"}, 2},
		{"agl_reaper_actions_total", map[string]string{"action": "timed_out"}, 0},
		{"agl_reaper_actions_total", map[string]string{"action": "requeued"}, 1},
		{"agl_reaper_actions_total", map[string]string{"action": "failed"}, 1},
		{"agl_trainer_steps_total", nil, 1},
		{"agl_trainer_step_duration_seconds", nil, 1},
		{"agl_trainer_reward", nil, 0.75},
		{"agl_trainer_success_rate", nil, 0.5},
		{"agl_otlp_spans_total", map[string]string{"outcome": "stored"}, 4},
		{"agl_otlp_spans_total", map[string]string{"outcome": "rejected"}, 1},
	}
	for _, tc := range tests {
		mustValue(t, fams, tc.name, tc.labels, tc.want)
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Error("runtime collector missing: no go_goroutines")
	}

	// Scrape-time counts follow the store.
	done()
	if _, err := st.CompleteAttempt(ctx, cl.Rollout.ID, cl.Attempt.ID, store.AttemptSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	fams = scrape(t, srv)
	mustValue(t, fams, "agl_rollouts", map[string]string{"status": "running"}, 0)
	mustValue(t, fams, "agl_rollouts", map[string]string{"status": "succeeded"}, 1)
	mustValue(t, fams, "agl_model_calls_in_flight", map[string]string{"api": "responses"}, 0)
}

func TestRegistriesAreIndependent(t *testing.T) {
	a, b := metrics.New(metrics.Options{}), metrics.New(metrics.Options{})
	a.ObserveCall("completions", 200, time.Millisecond, 1, 1)
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()
	if v, ok := value(t, scrape(t, srv), "agl_model_calls_total", nil); ok {
		t.Errorf("second Metrics sees the first's call: %v", v)
	}
}

// failingStore fails CountRollouts; everything else is unused.
type failingStore struct{ store.Store }

func (failingStore) CountRollouts(context.Context) (store.Counts, error) {
	return nil, errors.New("database is locked")
}

func TestScrapeSurvivesStoreError(t *testing.T) {
	m := metrics.New(metrics.Options{})
	m.CountRollouts(failingStore{})
	m.ObserveCall("responses", 200, time.Millisecond, 3, 4)
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	fams := scrape(t, srv)
	mustValue(t, fams, "agl_model_calls_total", map[string]string{"api": "responses", "status": "200"}, 1)
	if _, ok := fams["agl_rollouts"]; ok {
		t.Error("agl_rollouts exported although the store failed")
	}
}

func TestRouteClass(t *testing.T) {
	tests := []struct{ path, want string }{
		{"/r/r1/a1/v1/chat/completions", "chat.completions"},
		{"/r/r1/a1/v1/completions", "completions"},
		{"/r/r1/a1/v1/responses", "responses"},
		{"/r/r1/a1/v1/messages", "messages"},
		{"/r/r1/a1/v1/messages/count_tokens", "count_tokens"},
		{"/r/r1/a1/v1/models", "models"},
		{"/r/r1/a1/v1/traces", "otlp.traces"},
		{"/r/r1/a1/v1/embeddings", "llm.other"},
		{"/r/r1", "llm.other"},
		{"/v1/traces", "otlp.traces"},
		{"/api/health", "api.health"},
		{"/api/claim", "api.claim"},
		{"/api/rollouts", "api.rollouts"},
		{"/api/rollouts/r1", "api.rollouts"},
		{"/api/rollouts/r1/cancel", "api.cancel"},
		{"/api/rollouts/r1/events", "api.events"},
		{"/api/rollouts/r1/attempts/a1/events", "api.events"},
		{"/api/rollouts/r1/attempts/a1/heartbeat", "api.heartbeat"},
		{"/api/rollouts/r1/attempts/a1/complete", "api.complete"},
		{"/api/rollouts/r1/attempts/a1/nope", "api.other"},
		{"/api/gateway/pause", "api.gateway"},
		{"/api/terminal", "api.terminal"},
		{"/api/models", "api.models"},
		{"/api/whatever", "api.other"},
		{"/metrics", "metrics"},
		{"/", "other"},
		{"/assets/app.js", "other"},
	}
	for _, tc := range tests {
		if got := metrics.RouteClass(tc.path); got != tc.want {
			t.Errorf("RouteClass(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}

func TestMiddleware(t *testing.T) {
	m := metrics.New(metrics.Options{})
	app := http.NewServeMux()
	app.HandleFunc("POST /r/{rid}/{aid}/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Fail") != "" {
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		// Streams: Flush must pass through the wrapper.
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: 1\n\n")
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush through middleware: %v", err)
		}
		io.WriteString(w, "data: [DONE]\n\n")
	})
	app.HandleFunc("GET /api/health", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	mux.Handle("/", m.Middleware(app))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	do := func(method, path string, fail bool) int {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		if fail {
			req.Header.Set("X-Fail", "1")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := 0; i < 3; i++ {
		do("POST", "/r/r1/a1/v1/chat/completions", false)
	}
	do("POST", "/r/r2/a9/v1/chat/completions", true)
	do("GET", "/api/health", false)
	do("GET", "/api/rollouts/x", false) // 404 from the app mux

	fams := scrape(t, srv)
	mustValue(t, fams, "agl_http_requests_total", map[string]string{"route": "chat.completions", "status": "200"}, 3)
	mustValue(t, fams, "agl_http_requests_total", map[string]string{"route": "chat.completions", "status": "400"}, 1)
	mustValue(t, fams, "agl_http_requests_total", map[string]string{"route": "api.health", "status": "200"}, 1)
	mustValue(t, fams, "agl_http_requests_total", map[string]string{"route": "api.rollouts", "status": "404"}, 1)
	mustValue(t, fams, "agl_http_request_duration_seconds", map[string]string{"route": "chat.completions"}, 4)
	mustValue(t, fams, "agl_http_requests_in_flight", map[string]string{"route": "chat.completions"}, 0)
	for _, mm := range fams["agl_http_requests_total"].GetMetric() {
		for _, l := range mm.GetLabel() {
			if l.GetValue() == "r1" || l.GetValue() == "a1" {
				t.Errorf("an id leaked into a label: %v", mm.GetLabel())
			}
		}
	}
}

// TestTrainStepsThroughStore: trainer steps reported to an observed store
// (as POST /api/train/steps does) set the step time, reward and success
// gauges; validation steps do not.
func TestTrainStepsThroughStore(t *testing.T) {
	ctx := context.Background()
	m := metrics.New(metrics.Options{})
	st := testutil.ObservedSQLite(t, m)
	for _, ts := range []store.TrainStep{
		{Run: "r", Mode: store.ModeTrain, Step: 1, Metrics: json.RawMessage(`{"reward_mean":0.25,"success_rate":0.5,"rollout_seconds":2,"train_seconds":1.5}`)},
		{Run: "r", Mode: store.ModeVal, Step: 1, Metrics: json.RawMessage(`{"reward_mean":0.9,"success_rate":1}`)},
	} {
		if err := st.PutTrainStep(ctx, ts); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	fams := scrape(t, srv)
	for name, want := range map[string]float64{"agl_trainer_steps_total": 1, "agl_trainer_reward": 0.25, "agl_trainer_success_rate": 0.5} {
		if got, ok := value(t, fams, name, nil); !ok || got != want {
			t.Errorf("%s = %v (%v), want %v", name, got, ok, want)
		}
	}
	h := fams["agl_trainer_step_duration_seconds"].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != 1 || h.GetSampleSum() != 3.5 {
		t.Errorf("step duration: %d samples, sum %v; want 1, 3.5", h.GetSampleCount(), h.GetSampleSum())
	}
}

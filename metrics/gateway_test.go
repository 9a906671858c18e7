package metrics_test

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/gateway"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/metrics"
	"github.com/aglrl/agl/otlp"
	"github.com/aglrl/agl/store"
)

// TestGatewayWiring mounts /metrics and the OTLP intake on a real gateway
// the way cmd/agl should, and checks requests, events, model calls and
// spans all show up in one scrape.
func TestGatewayWiring(t *testing.T) {
	ctx := context.Background()
	const admin = "admin-key"
	m := metrics.New(metrics.Options{CallsFromEvents: true})
	st := testutil.ObservedSQLite(t, m)
	m.CountRollouts(st)
	gw := gateway.New(gateway.Options{Store: st, AdminKey: admin, ReapInterval: -1, Logger: slog.New(slog.DiscardHandler)})
	gw.Handle("GET /metrics", m.Handler())
	isAdmin := func(r *http.Request) bool {
		return subtle.ConstantTimeCompare([]byte(gateway.RequestKey(r)), []byte(admin)) == 1
	}
	otlp.Mount(gw, otlp.NewHandler(st, otlp.WithAuthorize(isAdmin), otlp.WithObserver(m.ObserveSpans)))
	srv := httptest.NewServer(m.Middleware(gw))
	defer srv.Close()

	if _, err := st.CreateRollouts(ctx, []store.NewRollout{{ID: "r1", Task: json.RawMessage(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	cl, err := st.Claim(ctx, store.ClaimRequest{WorkerID: "w"})
	if err != nil {
		t.Fatal(err)
	}

	// A model call recorded as the proxy records it, appended over the API
	// (with the admin key: a scoped key may not append model_request).
	call, _ := json.Marshal(api.ModelCall{CallID: "c1", API: api.ShapeMessages, PromptIDs: []int32{1, 2, 3}, ResponseIDs: []int32{4, 5},
		Usage: api.Usage{PromptTokens: 3, CompletionTokens: 2}, LatencyMS: 250})
	// And the record of a call that failed.
	failed, _ := json.Marshal(api.ModelCall{CallID: "c2", API: api.ShapeMessages, Status: api.CallError, HTTPStatus: 502, Error: `{"type":"error"}`})
	body, _ := json.Marshal(api.AppendEventsRequest{Events: []store.NewEvent{{Type: store.EventModelRequest, Data: call}, {Type: store.EventModelRequest, Data: failed}}})
	req, _ := http.NewRequest("POST", srv.URL+"/api/rollouts/r1/attempts/"+cl.Attempt.ID+"/events", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+admin)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("append events: %d %s", resp.StatusCode, b)
	}

	// Spans from the OpenTelemetry SDK, to the attempt's base URL.
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(srv.URL+"/r/r1/"+cl.Attempt.ID+"/v1/traces"),
		otlptracehttp.WithHeaders(map[string]string{"Authorization": "Bearer " + cl.Key}),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	_, sp := tp.Tracer("h").Start(ctx, "step")
	sp.End()
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if evs, err := st.ListEvents(ctx, store.EventFilter{RolloutID: "r1", Types: []string{store.EventSpan}}); err != nil || len(evs) != 1 {
		t.Fatalf("span events %v, %v; want 1", evs, err)
	}

	// Unauthenticated scrape is fine (mounted without a guard); the admin
	// API without a key is a 401 that must be counted.
	if resp, err := http.Get(srv.URL + "/api/rollouts"); err == nil {
		resp.Body.Close()
	}
	fams := scrape(t, srv)
	mustValue(t, fams, "agl_model_calls_total", map[string]string{"api": "messages", "status": "200"}, 1)
	mustValue(t, fams, "agl_model_calls_total", map[string]string{"api": "messages", "status": "502"}, 1)
	mustValue(t, fams, "agl_tokens_total", map[string]string{"api": "messages", "direction": "in"}, 3)
	mustValue(t, fams, "agl_tokens_total", map[string]string{"api": "messages", "direction": "out"}, 2)
	mustValue(t, fams, "agl_events_appended_total", map[string]string{"type": "model_request"}, 2)
	mustValue(t, fams, "agl_events_appended_total", map[string]string{"type": "span"}, 1)
	mustValue(t, fams, "agl_otlp_spans_total", map[string]string{"outcome": "stored"}, 1)
	mustValue(t, fams, "agl_http_requests_total", map[string]string{"route": "api.events", "status": "200"}, 1)
	mustValue(t, fams, "agl_http_requests_total", map[string]string{"route": "otlp.traces", "status": "200"}, 1)
	mustValue(t, fams, "agl_http_requests_total", map[string]string{"route": "api.rollouts", "status": "401"}, 1)
	mustValue(t, fams, "agl_rollouts", map[string]string{"status": "running"}, 1)
	if h := fams["agl_model_call_duration_seconds"].GetMetric()[0].GetHistogram(); h.GetSampleSum() != 0.25 {
		t.Errorf("call latency sum %v s, want 0.25", h.GetSampleSum())
	}
}

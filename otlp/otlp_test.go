package otlp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/aglrl/agl/otlp"
	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/sqlite"
)

const adminKey = "admin-secret"

type env struct {
	st      store.Store
	handler http.Handler
	srv     *httptest.Server
	claims  []store.Claim // running attempts of rollouts r0, r1
	stored  int
	reject  int
}

// newEnv starts the intake on a real sqlite store with two running attempts
// (r0, r1) and one queuing rollout (rq).
func newEnv(t *testing.T) *env { return newEnvTB(t) }

func newEnvTB(t testing.TB) *env {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "agl.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.CreateRollouts(ctx, []store.NewRollout{
		{ID: "r0", Task: json.RawMessage(`{}`)},
		{ID: "r1", Task: json.RawMessage(`{}`)},
		{ID: "rq", Task: json.RawMessage(`{}`)},
	}); err != nil {
		t.Fatal(err)
	}
	e := &env{st: st}
	for range 2 {
		cl, err := st.Claim(ctx, store.ClaimRequest{WorkerID: "w"})
		if err != nil {
			t.Fatal(err)
		}
		e.claims = append(e.claims, cl)
	}
	if e.claims[0].Rollout.ID != "r0" || e.claims[1].Rollout.ID != "r1" {
		t.Fatalf("claimed %s, %s; want r0, r1", e.claims[0].Rollout.ID, e.claims[1].Rollout.ID)
	}
	h := otlp.NewHandler(st,
		otlp.WithAuthorize(func(r *http.Request) bool { return r.Header.Get("Authorization") == "Bearer "+adminKey }),
		otlp.WithObserver(func(s, r int) { e.stored += s; e.reject += r }),
	)
	e.handler = h
	mux := http.NewServeMux()
	otlp.Mount(mux, h)
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	return e
}

// spans returns the span events of a rollout, decoded.
func (e *env) spans(t *testing.T, rollout string) ([]store.Event, []otlp.SpanData) {
	t.Helper()
	evs, err := e.st.ListEvents(context.Background(), store.EventFilter{RolloutID: rollout, Types: []string{store.EventSpan}})
	if err != nil {
		t.Fatal(err)
	}
	var ds []otlp.SpanData
	for _, ev := range evs {
		var d otlp.SpanData
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	return evs, ds
}

func (e *env) totalSpans(t *testing.T) int {
	n := 0
	for _, r := range []string{"r0", "r1", "rq"} {
		evs, _ := e.spans(t, r)
		n += len(evs)
	}
	return n
}

// recorder keeps the first error the wrapped exporter returned (the SDK
// would only log it).
type recorder struct {
	sdktrace.SpanExporter
	err error
}

func (r *recorder) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := r.SpanExporter.ExportSpans(ctx, spans)
	if err != nil && r.err == nil {
		r.err = err
	}
	return err
}

// export sends spans with the OpenTelemetry Go SDK's OTLP/HTTP exporter
// and returns the export error, if any.
func export(t *testing.T, url string, headers map[string]string, res *resource.Resource, opts []otlptracehttp.Option, emit func(tr trace.Tracer)) error {
	t.Helper()
	ctx := context.Background()
	opts = append([]otlptracehttp.Option{
		otlptracehttp.WithEndpointURL(url),
		otlptracehttp.WithHeaders(headers),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}),
	}, opts...)
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{SpanExporter: exp}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(rec), sdktrace.WithResource(res))
	emit(tp.Tracer("agent-harness", trace.WithInstrumentationVersion("1.2.3")))
	if err := tp.Shutdown(ctx); err != nil && rec.err == nil {
		return err
	}
	return rec.err
}

func TestSDKExporterAttachesSpans(t *testing.T) {
	e := newEnv(t)
	cl0, cl1 := e.claims[0], e.claims[1]
	tests := []struct {
		name    string
		path    string
		key     string
		res     *resource.Resource
		opts    []otlptracehttp.Option
		spanRID string // agl.rollout_id on the span itself
		want    string // rollout the spans must land under
	}{
		{name: "scoped key on attempt path, protobuf", path: "/r/r0/" + cl0.Attempt.ID + "/v1/traces", key: cl0.Key,
			res: resource.NewSchemaless(attribute.String("service.name", "harness")), want: "r0"},
		{name: "scoped key on attempt path, JSON, gzip", path: "/r/r1/" + cl1.Attempt.ID + "/v1/traces", key: cl1.Key,
			res:  resource.NewSchemaless(attribute.String("service.name", "harness")),
			opts: []otlptracehttp.Option{otlptracehttp.WithEncoding(otlptracehttp.EncodingJSON), otlptracehttp.WithCompression(otlptracehttp.GzipCompression)},
			want: "r1"},
		{name: "admin key, resource attributes", path: "/v1/traces", key: adminKey,
			res:  resource.NewSchemaless(attribute.String(otlp.AttrRolloutID, "r1"), attribute.String(otlp.AttrAttemptID, cl1.Attempt.ID)),
			want: "r1"},
		{name: "admin key, span attribute with rollout only", path: "/v1/traces", key: adminKey,
			res: resource.NewSchemaless(), spanRID: "r0", want: "r0"},
		{name: "scoped key on /v1/traces naming its own attempt", path: "/v1/traces", key: cl0.Key,
			res:  resource.NewSchemaless(attribute.String(otlp.AttrRolloutID, "r0"), attribute.String(otlp.AttrAttemptID, cl0.Attempt.ID)),
			opts: []otlptracehttp.Option{otlptracehttp.WithEncoding(otlptracehttp.EncodingJSON)},
			want: "r0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := e.spans(t, tc.want)
			err := export(t, e.srv.URL+tc.path, map[string]string{"Authorization": "Bearer " + tc.key}, tc.res, tc.opts, func(tr trace.Tracer) {
				ctx, root := tr.Start(context.Background(), "agent.run", trace.WithSpanKind(trace.SpanKindServer))
				if tc.spanRID != "" {
					root.SetAttributes(attribute.String(otlp.AttrRolloutID, tc.spanRID))
				}
				_, tool := tr.Start(ctx, "tool.search", trace.WithAttributes(attribute.String("tool.query", "weather"), attribute.Int("tool.results", 3)))
				if tc.spanRID != "" {
					tool.SetAttributes(attribute.String(otlp.AttrRolloutID, tc.spanRID))
				}
				tool.AddEvent("retry", trace.WithAttributes(attribute.Int("n", 1)))
				time.Sleep(2 * time.Millisecond)
				tool.SetStatus(codes.Error, "timeout")
				tool.End()
				root.End()
			})
			if err != nil {
				t.Fatalf("export: %v", err)
			}
			after, ds := e.spans(t, tc.want)
			if len(after)-len(before) != 2 {
				t.Fatalf("%d span events under %s, want 2 more than %d", len(after), tc.want, len(before))
			}
			ds = ds[len(before):]
			byName := map[string]otlp.SpanData{}
			for _, d := range ds {
				byName[d.Name] = d
			}
			root, tool := byName["agent.run"], byName["tool.search"]
			if root.Kind != "server" || tool.Kind != "internal" {
				t.Errorf("kinds %q/%q", root.Kind, tool.Kind)
			}
			if tool.ParentSpanID != root.SpanID || tool.TraceID != root.TraceID || len(root.TraceID) != 32 || root.ParentSpanID != "" {
				t.Errorf("tree: root %+v tool %+v", root, tool)
			}
			if tool.Status.Code != "error" || tool.Status.Message != "timeout" {
				t.Errorf("status %+v", tool.Status)
			}
			if tool.Attributes["tool.query"] != "weather" || tool.Attributes["tool.results"] != float64(3) {
				t.Errorf("attributes %v", tool.Attributes)
			}
			if len(tool.Events) != 1 || tool.Events[0].Name != "retry" {
				t.Errorf("events %v", tool.Events)
			}
			if tool.DurationMS < 2 || tool.End.Sub(tool.Start) < 2*time.Millisecond {
				t.Errorf("duration %v ms, %v..%v", tool.DurationMS, tool.Start, tool.End)
			}
			if tool.Scope.Name != "agent-harness" || tool.Scope.Version != "1.2.3" {
				t.Errorf("scope %+v", tool.Scope)
			}
			if strings.HasPrefix(tc.name, "scoped key on attempt path") && tool.Resource["service.name"] != "harness" {
				t.Errorf("resource %v", tool.Resource)
			}
			evs := after[len(before):]
			wantAttempt := e.claims[0].Attempt.ID
			if tc.want == "r1" {
				wantAttempt = e.claims[1].Attempt.ID
			}
			for _, ev := range evs {
				if ev.AttemptID != wantAttempt {
					t.Errorf("event under attempt %s, want %s", ev.AttemptID, wantAttempt)
				}
			}
		})
	}
}

// post sends a raw OTLP body.
func post(t *testing.T, url, contentType, key string, body []byte) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequest("POST", url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

// jsonSpans is an OTLP/JSON request with one resource naming rollout/attempt
// (when given) and spans with the given ids.
func jsonSpans(rollout, attempt string, ids ...string) []byte {
	var attrs []string
	if rollout != "" {
		attrs = append(attrs, `{"key":"agl.rollout_id","value":{"stringValue":"`+rollout+`"}}`)
	}
	if attempt != "" {
		attrs = append(attrs, `{"key":"agl.attempt_id","value":{"stringValue":"`+attempt+`"}}`)
	}
	var spans []string
	for _, id := range ids {
		spans = append(spans, `{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"`+id+`","name":"s-`+id+`","kind":1,"startTimeUnixNano":"1700000000000000000","endTimeUnixNano":"1700000000500000000"}`)
	}
	return []byte(`{"resourceSpans":[{"resource":{"attributes":[` + strings.Join(attrs, ",") + `]},"scopeSpans":[{"scope":{"name":"raw"},"spans":[` + strings.Join(spans, ",") + `]}]}]}`)
}

// join merges OTLP/JSON requests made by jsonSpans into one.
func join(reqs ...[]byte) []byte {
	const head, tail = `{"resourceSpans":[`, `]}`
	var parts []string
	for _, r := range reqs {
		parts = append(parts, strings.TrimSuffix(strings.TrimPrefix(string(r), head), tail))
	}
	return []byte(head + strings.Join(parts, ",") + tail)
}

func TestSDKExporterForbidden(t *testing.T) {
	e := newEnv(t)
	cl0, cl1 := e.claims[0], e.claims[1]
	// r1's key posting to r0's attempt path.
	err := export(t, e.srv.URL+"/r/r0/"+cl0.Attempt.ID+"/v1/traces", map[string]string{"Authorization": "Bearer " + cl1.Key},
		resource.NewSchemaless(), nil, func(tr trace.Tracer) {
			_, s := tr.Start(context.Background(), "x")
			s.End()
		})
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("export with another attempt's key: %v, want a 403 error", err)
	}
	if n := e.totalSpans(t); n != 0 {
		t.Errorf("%d span events stored", n)
	}
}

func TestRejected(t *testing.T) {
	e := newEnv(t)
	cl0, cl1 := e.claims[0], e.claims[1]
	goodProto := func() []byte {
		req := ptraceotlp.NewExportRequest()
		if err := req.UnmarshalJSON(jsonSpans("r0", cl0.Attempt.ID, "eee19b7ec3c1b174")); err != nil {
			t.Fatal(err)
		}
		b, err := req.MarshalProto()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}()
	tests := []struct {
		name, path, ct, key string
		body                []byte
		status              int
		code                string
	}{
		{"garbage protobuf", "/v1/traces", otlp.ContentTypeProtobuf, adminKey, []byte{0xff, 0xff, 0xff, 0x01, 0x02}, 400, "invalid_request"},
		{"truncated protobuf", "/v1/traces", otlp.ContentTypeProtobuf, adminKey, goodProto[:len(goodProto)-3], 400, "invalid_request"},
		{"not JSON", "/v1/traces", otlp.ContentTypeJSON, adminKey, []byte(`{"resourceSpans":[{`), 400, "invalid_request"},
		{"JSON with trailing garbage", "/v1/traces", otlp.ContentTypeJSON, adminKey, append(jsonSpans("r0", cl0.Attempt.ID, "eee19b7ec3c1b174"), " }{"...), 400, "invalid_request"},
		{"JSON wrong type", "/v1/traces", otlp.ContentTypeJSON, adminKey, []byte(`{"resourceSpans":5}`), 400, "invalid_request"},
		{"JSON bad timestamp", "/v1/traces", otlp.ContentTypeJSON, adminKey, bytes.Replace(jsonSpans("r0", cl0.Attempt.ID, "eee19b7ec3c1b174"), []byte(`"1700000000000000000"`), []byte(`"soon"`), 1), 400, "invalid_request"},
		{"JSON bad trace id", "/v1/traces", otlp.ContentTypeJSON, adminKey, bytes.Replace(jsonSpans("r0", cl0.Attempt.ID, "eee19b7ec3c1b174"), []byte("5b8efff7"), []byte("zz"), 1), 400, "invalid_request"},
		{"JSON zero span id", "/v1/traces", otlp.ContentTypeJSON, adminKey, jsonSpans("r0", cl0.Attempt.ID, "eee19b7ec3c1b174", "0000000000000000"), 400, "invalid_request"},
		{"JSON missing span id", "/v1/traces", otlp.ContentTypeJSON, adminKey, jsonSpans("r0", cl0.Attempt.ID, "eee19b7ec3c1b174", ""), 400, "invalid_request"},
		{"wrong content type", "/v1/traces", "text/plain", adminKey, goodProto, 415, "unsupported_media_type"},
		{"no key", "/v1/traces", otlp.ContentTypeProtobuf, "", goodProto, 401, "unauthorized"},
		{"wrong admin key", "/v1/traces", otlp.ContentTypeProtobuf, "nope", goodProto, 401, "unauthorized"},
		{"scoped key of another attempt, attributes", "/v1/traces", otlp.ContentTypeJSON, cl1.Key, jsonSpans("r0", cl0.Attempt.ID, "eee19b7ec3c1b174"), 403, "forbidden"},
		{"scoped key of another attempt, rollout only", "/v1/traces", otlp.ContentTypeJSON, cl1.Key, jsonSpans("r0", "", "eee19b7ec3c1b174"), 403, "forbidden"},
		{"scoped key of another attempt, path", "/r/r0/" + cl0.Attempt.ID + "/v1/traces", otlp.ContentTypeProtobuf, cl1.Key, goodProto, 403, "forbidden"},
		{"own path but a span names another attempt", "/r/r1/" + cl1.Attempt.ID + "/v1/traces", otlp.ContentTypeJSON, cl1.Key,
			join(jsonSpans("", "", "aaa19b7ec3c1b174"), jsonSpans("r0", cl0.Attempt.ID, "bbb19b7ec3c1b174")), 403, "forbidden"},
		{"forged scoped key", "/r/r0/" + cl0.Attempt.ID + "/v1/traces", otlp.ContentTypeProtobuf, store.KeyPrefix + "forged", goodProto, 403, "forbidden"},
		{"unknown scoped key, spans name no rollout", "/v1/traces", otlp.ContentTypeJSON, store.KeyPrefix + "forged", jsonSpans("", "", "eee19b7ec3c1b174"), 401, "unauthorized"},
		{"unknown scoped key, no spans", "/v1/traces", otlp.ContentTypeJSON, store.KeyPrefix + "forged", []byte(`{"resourceSpans":[]}`), 401, "unauthorized"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body, hdr := post(t, e.srv.URL+tc.path, tc.ct, tc.key, tc.body)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, body)
			}
			var er struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(body, &er); err != nil || er.Error.Code != tc.code || er.Error.Message == "" {
				t.Errorf("error body %s (%v), want code %q", body, err, tc.code)
			}
			if ct := hdr.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if n := e.totalSpans(t); n != 0 {
				t.Errorf("%d span events stored after a rejected request", n)
			}
		})
	}
	// The good payload itself is accepted: the 400s above are about the payload.
	if status, body, _ := post(t, e.srv.URL+"/v1/traces", otlp.ContentTypeProtobuf, adminKey, goodProto); status != 200 {
		t.Fatalf("good payload: %d %s", status, body)
	}
	if n := e.totalSpans(t); n != 1 {
		t.Errorf("%d span events after the good payload, want 1", n)
	}
}

func TestPartialSuccess(t *testing.T) {
	e := newEnv(t)
	cl0 := e.claims[0]
	// Three resources: one names r0's attempt (2 spans), one names nothing
	// (1 span), one names the queuing rollout rq, which has no running
	// attempt (1 span).
	body := string(join(jsonSpans("r0", cl0.Attempt.ID, "0000000000000001", "0000000000000002"), jsonSpans("", "", "0000000000000003"), jsonSpans("rq", "", "0000000000000004")))
	for _, enc := range []string{"json", "proto"} {
		t.Run(enc, func(t *testing.T) {
			ct, payload := otlp.ContentTypeJSON, []byte(body)
			if enc == "proto" {
				req := ptraceotlp.NewExportRequest()
				if err := req.UnmarshalJSON(payload); err != nil {
					t.Fatal(err)
				}
				payload, _ = req.MarshalProto()
				ct = otlp.ContentTypeProtobuf
			}
			before, _ := e.spans(t, "r0")
			status, out, hdr := post(t, e.srv.URL+"/v1/traces", ct, adminKey, payload)
			if status != 200 {
				t.Fatalf("status %d: %s", status, out)
			}
			if got := hdr.Get("Content-Type"); got != ct {
				t.Errorf("response Content-Type %q, want %q", got, ct)
			}
			resp := ptraceotlp.NewExportResponse()
			if enc == "json" {
				if err := resp.UnmarshalJSON(out); err != nil {
					t.Fatal(err)
				}
			} else if err := resp.UnmarshalProto(out); err != nil {
				t.Fatal(err)
			}
			ps := resp.PartialSuccess()
			if ps.RejectedSpans() != 2 || !strings.Contains(ps.ErrorMessage(), "no running attempt") || !strings.Contains(ps.ErrorMessage(), otlp.AttrRolloutID) {
				t.Errorf("partial success %d %q", ps.RejectedSpans(), ps.ErrorMessage())
			}
			after, ds := e.spans(t, "r0")
			if len(after)-len(before) != 2 {
				t.Fatalf("%d new span events under r0, want 2", len(after)-len(before))
			}
			d := ds[len(ds)-1]
			if d.DurationMS != 500 || d.Kind != "internal" || d.Resource[otlp.AttrRolloutID] != "r0" || d.Scope.Name != "raw" {
				t.Errorf("span data %+v", d)
			}
			if !after[len(after)-1].Time.Equal(time.Unix(1700000000, 0)) {
				t.Errorf("event time %v, want the span start", after[len(after)-1].Time)
			}
			if evs, _ := e.spans(t, "rq"); len(evs) != 0 {
				t.Errorf("%d spans under the queuing rollout", len(evs))
			}
		})
	}
	if e.stored != 4 || e.reject != 4 {
		t.Errorf("observer saw %d stored, %d rejected; want 4, 4", e.stored, e.reject)
	}
}

func TestEndedAttemptRejectsSpans(t *testing.T) {
	e := newEnv(t)
	cl0 := e.claims[0]
	if _, err := e.st.CompleteAttempt(context.Background(), "r0", cl0.Attempt.ID, store.AttemptSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	status, out, _ := post(t, e.srv.URL+"/r/r0/"+cl0.Attempt.ID+"/v1/traces", otlp.ContentTypeJSON, cl0.Key, jsonSpans("", "", "0000000000000009"))
	if status != 200 {
		t.Fatalf("status %d: %s", status, out)
	}
	resp := ptraceotlp.NewExportResponse()
	if err := resp.UnmarshalJSON(out); err != nil {
		t.Fatal(err)
	}
	if resp.PartialSuccess().RejectedSpans() != 1 || !strings.Contains(resp.PartialSuccess().ErrorMessage(), "not running") {
		t.Errorf("partial success %d %q", resp.PartialSuccess().RejectedSpans(), resp.PartialSuccess().ErrorMessage())
	}
	if n := e.totalSpans(t); n != 0 {
		t.Errorf("%d span events stored for an ended attempt", n)
	}
}

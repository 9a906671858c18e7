// Package otlp takes OpenTelemetry spans over OTLP/HTTP (protobuf and JSON)
// and stores each one as a "span" event of the rollout attempt it belongs
// to, so a harness instrumented with OpenTelemetry shows its own spans next
// to the model calls the gateway recorded.
//
// Two routes (see Mount):
//
//	POST /v1/traces                        admin key, or a scoped key; spans name their
//	                                       rollout with agl.rollout_id (+ agl.attempt_id)
//	POST /r/{rollout}/{attempt}/v1/traces  the attempt's scoped key (or admin); spans
//	                                       without those attributes go to that attempt
//
// The second lets a harness point its OTLP exporter at the same base it
// uses for the model, with the same scoped key; with any OpenTelemetry SDK:
//
//	OTEL_EXPORTER_OTLP_ENDPOINT=http://<gateway>/r/<rollout>/<attempt>
//	OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer <scoped key>"
//	OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf   (or http/json)
//
// (the SDK appends /v1/traces to OTEL_EXPORTER_OTLP_ENDPOINT; gzip
// compression is accepted).
//
// A span's attributes win over its resource's, which win over the path. A
// span naming a rollout but no attempt goes to that rollout's running
// attempt. A scoped key may write only to its own attempt: a request with a
// span naming any other gets 403 and nothing is stored. Spans that name no
// rollout, or whose attempt is not running, are dropped and counted in the
// response's partial_success. A malformed payload gets 400 and nothing is
// stored: the whole request is decoded and checked before anything is
// appended.
package otlp

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"mime"
	"net/http"
	"sort"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

// Attributes that attach a span to a rollout attempt.
const (
	AttrRolloutID = "agl.rollout_id"
	AttrAttemptID = "agl.attempt_id"
)

// Patterns to mount the handler on (http.ServeMux syntax).
const (
	PatternTraces        = "POST /v1/traces"
	PatternAttemptTraces = "POST /r/{rollout}/{attempt}/v1/traces"
)

// Mux is what Mount mounts on: *http.ServeMux and *gateway.Server have it.
type Mux interface {
	Handle(pattern string, h http.Handler)
}

// Mount mounts h on both trace routes.
func Mount(mux Mux, h http.Handler) {
	mux.Handle(PatternTraces, h)
	mux.Handle(PatternAttemptTraces, h)
}

// Content types of OTLP/HTTP.
const (
	ContentTypeProtobuf = "application/x-protobuf"
	ContentTypeJSON     = "application/json"
)

// Option configures NewHandler.
type Option func(*handler)

// WithAuthorize sets the admin check for requests that carry no scoped
// attempt key (typically the gateway's admin-key comparison). Without it
// every such request is admitted. Scoped keys (agl_sk_…) are always checked
// against the store, whatever authorize says.
func WithAuthorize(authorize func(r *http.Request) bool) Option {
	return func(h *handler) { h.authorize = authorize }
}

// WithMaxBodyBytes bounds a request body after decompression (default 16 MiB).
func WithMaxBodyBytes(n int64) Option {
	return func(h *handler) {
		if n > 0 {
			h.maxBody = n
		}
	}
}

// WithObserver is told, after each request, how many spans were stored and
// how many dropped (e.g. metrics.(*Metrics).ObserveSpans).
func WithObserver(observe func(stored, rejected int)) Option {
	return func(h *handler) { h.observe = observe }
}

// WithLogger sets where unexpected errors are logged (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(h *handler) {
		if l != nil {
			h.log = l
		}
	}
}

type handler struct {
	st        store.Store
	authorize func(r *http.Request) bool
	maxBody   int64
	observe   func(stored, rejected int)
	log       *slog.Logger
}

// NewHandler returns the OTLP/HTTP trace intake over st.
func NewHandler(st store.Store, opts ...Option) http.Handler {
	h := &handler{st: st, maxBody: 16 << 20, log: slog.Default()}
	for _, o := range opts {
		o(h)
	}
	return h
}

// SpanData is the data of a "span" event.
type SpanData struct {
	TraceID      string         `json:"trace_id"`
	SpanID       string         `json:"span_id"`
	ParentSpanID string         `json:"parent_span_id,omitempty"`
	Name         string         `json:"name"`
	Kind         string         `json:"kind"`
	Start        time.Time      `json:"start"`
	End          time.Time      `json:"end"`
	DurationMS   float64        `json:"duration_ms"`
	Status       Status         `json:"status"`
	Attributes   map[string]any `json:"attributes,omitempty"`
	// Resource holds the resource attributes (service.name, …).
	Resource map[string]any `json:"resource,omitempty"`
	Scope    Scope          `json:"scope"`
	Events   []SpanEvent    `json:"events,omitempty"`
	Links    []SpanLink     `json:"links,omitempty"`
}

// Status is a span's status: code "unset", "ok" or "error".
type Status struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

// Scope is the instrumentation scope that made a span.
type Scope struct {
	Name    string `json:"name,omitempty"`
	Version string `json:"version,omitempty"`
}

// SpanEvent is a timed annotation inside a span.
type SpanEvent struct {
	Name       string         `json:"name"`
	Time       time.Time      `json:"time"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// SpanLink points to another span.
type SpanLink struct {
	TraceID    string         `json:"trace_id"`
	SpanID     string         `json:"span_id"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// target is the attempt a span goes to.
type target struct{ rollout, attempt string }

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	stored, rejected, resp, ct, err := h.serve(r)
	if h.observe != nil && (stored > 0 || rejected > 0) {
		h.observe(stored, rejected)
	}
	if err != nil {
		api.WriteError(w, h.log, err)
		return
	}
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(http.StatusOK)
	w.Write(resp)
}

// serve does the work; it returns the encoded response and its content type.
func (h *handler) serve(r *http.Request) (stored, rejected int, resp []byte, ct string, err error) {
	if r.Method != http.MethodPost {
		return 0, 0, nil, "", api.Errorf(http.StatusMethodNotAllowed, "method_not_allowed", "use POST")
	}
	isJSON, err := requestEncoding(r)
	if err != nil {
		return 0, 0, nil, "", err
	}
	ctx := r.Context()
	pathTarget, err := attemptFromPath(r.URL.Path)
	if err != nil {
		return 0, 0, nil, "", err
	}
	key, err := api.RequestKey(r)
	if err != nil {
		return 0, 0, nil, "", api.Errorf(http.StatusUnauthorized, "unauthorized", "%v", err)
	}
	scoped := strings.HasPrefix(key, store.KeyPrefix)
	if !scoped && h.authorize != nil && !h.authorize(r) {
		if key == "" {
			return 0, 0, nil, "", api.Errorf(http.StatusUnauthorized, "unauthorized", "missing key: send Authorization: Bearer <key> or x-api-key")
		}
		return 0, 0, nil, "", api.Errorf(http.StatusUnauthorized, "unauthorized", "invalid key")
	}
	// A scoped key on the path form must be that attempt's, before we read a byte.
	if scoped && pathTarget.rollout != "" {
		if _, err := h.st.AttemptByKey(ctx, pathTarget.rollout, pathTarget.attempt, key); err != nil {
			return 0, 0, nil, "", forbidden(err, pathTarget)
		}
	}

	body, err := h.readBody(r)
	if err != nil {
		return 0, 0, nil, "", err
	}
	req := ptraceotlp.NewExportRequest()
	if isJSON {
		// pdata's decoder stops at the end of the first value; reject
		// anything that is not one well-formed JSON document.
		if !json.Valid(body) {
			return 0, 0, nil, "", api.Errorf(http.StatusBadRequest, "invalid_request", "malformed OTLP JSON payload: not valid JSON")
		}
		err = req.UnmarshalJSON(body)
	} else {
		err = req.UnmarshalProto(body)
	}
	if err != nil {
		return 0, 0, nil, "", api.Errorf(http.StatusBadRequest, "invalid_request", "malformed OTLP %s payload: %v", encodingName(isJSON), err)
	}

	groups, unattached, err := collect(req.Traces(), pathTarget)
	if err != nil {
		return 0, 0, nil, "", err
	}
	rejected = unattached
	var reasons []string
	if unattached > 0 {
		reasons = append(reasons, fmt.Sprintf("%d span(s) name no rollout: set resource or span attribute %s (and %s), or post to /r/{rollout}/{attempt}/v1/traces", unattached, AttrRolloutID, AttrAttemptID))
	}

	// Resolve and authorize every target before appending anything.
	targets := make([]target, 0, len(groups))
	for t := range groups {
		targets = append(targets, t)
	}
	sort.Slice(targets, func(i, j int) bool {
		if targets[i].rollout != targets[j].rollout {
			return targets[i].rollout < targets[j].rollout
		}
		return targets[i].attempt < targets[j].attempt
	})
	if scoped && len(targets) == 0 {
		// The key authorizes nothing in the request, so nothing checked it:
		// refuse it as unknown rather than answer partial success.
		return 0, 0, nil, "", api.Errorf(http.StatusUnauthorized, "unauthorized", "invalid key: a scoped key posts to its attempt's /r/{rollout}/{attempt}/v1/traces or names it in %s and %s", AttrRolloutID, AttrAttemptID)
	}
	resolved := make(map[target]target, len(targets))
	for _, t := range targets {
		rt, why, err := h.resolve(ctx, t, key, scoped)
		if err != nil {
			return 0, 0, nil, "", err
		}
		if why != "" {
			rejected += len(groups[t])
			reasons = append(reasons, fmt.Sprintf("%d span(s): %s", len(groups[t]), why))
			continue
		}
		resolved[t] = rt
	}

	for _, t := range targets {
		rt, ok := resolved[t]
		if !ok {
			continue
		}
		evs := groups[t]
		if _, err := h.st.AppendEvents(ctx, rt.rollout, rt.attempt, evs); err != nil {
			if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
				rejected += len(evs) // the attempt ended meanwhile
				reasons = append(reasons, fmt.Sprintf("%d span(s): %v", len(evs), err))
				continue
			}
			return stored, rejected, nil, "", fmt.Errorf("append spans to %s/%s: %w", rt.rollout, rt.attempt, err)
		}
		stored += len(evs)
	}

	out := ptraceotlp.NewExportResponse()
	if rejected > 0 {
		ps := out.PartialSuccess()
		ps.SetRejectedSpans(int64(rejected))
		ps.SetErrorMessage(strings.Join(reasons, "; "))
	}
	if isJSON {
		resp, err = out.MarshalJSON()
		ct = ContentTypeJSON
	} else {
		resp, err = out.MarshalProto()
		ct = ContentTypeProtobuf
	}
	if err != nil {
		return stored, rejected, nil, "", fmt.Errorf("encode OTLP response: %w", err)
	}
	return stored, rejected, resp, ct, nil
}

// resolve finds the running attempt t names and checks the key may write
// to it. why is non-empty when its spans are to be dropped; err aborts the
// request (403 for a scoped key of another attempt).
func (h *handler) resolve(ctx context.Context, t target, key string, scoped bool) (rt target, why string, err error) {
	if t.attempt == "" {
		ro, err := h.st.GetRollout(ctx, t.rollout)
		if err != nil {
			if errors.Is(err, store.ErrNotFound) {
				if scoped {
					return t, "", api.Errorf(http.StatusForbidden, "forbidden", "this key may not write spans to rollout %s", t.rollout)
				}
				return t, fmt.Sprintf("rollout %s not found", t.rollout), nil
			}
			return t, "", fmt.Errorf("get rollout %s: %w", t.rollout, err)
		}
		for _, a := range ro.Attempts {
			if a.Status == store.AttemptRunning {
				t.attempt = a.ID
			}
		}
		if t.attempt == "" {
			if scoped {
				return t, "", api.Errorf(http.StatusForbidden, "forbidden", "this key may not write spans to rollout %s: name its %s", t.rollout, AttrAttemptID)
			}
			return t, fmt.Sprintf("rollout %s has no running attempt", t.rollout), nil
		}
	}
	var att store.Attempt
	if scoped {
		att, err = h.st.AttemptByKey(ctx, t.rollout, t.attempt, key)
		if err != nil {
			return t, "", forbidden(err, t)
		}
	} else {
		ro, err := h.st.GetRollout(ctx, t.rollout)
		if err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return t, fmt.Sprintf("rollout %s not found", t.rollout), nil
			}
			return t, "", fmt.Errorf("get rollout %s: %w", t.rollout, err)
		}
		found := false
		for _, a := range ro.Attempts {
			if a.ID == t.attempt {
				att, found = a, true
			}
		}
		if !found {
			return t, fmt.Sprintf("attempt %s of rollout %s not found", t.attempt, t.rollout), nil
		}
	}
	if att.Status != store.AttemptRunning {
		return t, fmt.Sprintf("attempt %s of rollout %s is %s, not running", t.attempt, t.rollout, att.Status), nil
	}
	return t, "", nil
}

// forbidden maps a failed key check to 403 (store errors other than
// forbidden/not found stay internal).
func forbidden(err error, t target) error {
	if errors.Is(err, store.ErrForbidden) || errors.Is(err, store.ErrNotFound) {
		return api.Errorf(http.StatusForbidden, "forbidden", "this key may not write spans to rollout %s attempt %s", t.rollout, t.attempt)
	}
	return fmt.Errorf("check key for %s/%s: %w", t.rollout, t.attempt, err)
}

// collect turns every span into a "span" event grouped by the attempt it
// names; unattached counts spans that name none. Any invalid span fails the
// whole request with 400.
func collect(td ptrace.Traces, def target) (groups map[target][]store.NewEvent, unattached int, err error) {
	groups = map[target][]store.NewEvent{}
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		rattrs := rs.Resource().Attributes()
		rt := pick(def, rattrs)
		resource := rawAttrs(rattrs)
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			ss := sss.At(j)
			scope := Scope{Name: ss.Scope().Name(), Version: ss.Scope().Version()}
			spans := ss.Spans()
			for k := 0; k < spans.Len(); k++ {
				sp := spans.At(k)
				where := fmt.Sprintf("resource_spans[%d].scope_spans[%d].spans[%d]", i, j, k)
				if sp.TraceID().IsEmpty() {
					return nil, 0, api.Errorf(http.StatusBadRequest, "invalid_request", "%s: trace_id is empty or zero", where)
				}
				if sp.SpanID().IsEmpty() {
					return nil, 0, api.Errorf(http.StatusBadRequest, "invalid_request", "%s: span_id is empty or zero", where)
				}
				d := spanData(sp, resource, scope)
				data, err := json.Marshal(d)
				if err != nil {
					return nil, 0, api.Errorf(http.StatusBadRequest, "invalid_request", "%s: span not representable as JSON: %v", where, err)
				}
				t := pick(rt, sp.Attributes())
				if t.rollout == "" {
					unattached++
					continue
				}
				ev := store.NewEvent{Type: store.EventSpan, Data: data}
				if !d.Start.IsZero() {
					ev.Time = d.Start
				}
				groups[t] = append(groups[t], ev)
			}
		}
	}
	return groups, unattached, nil
}

// pick applies a rollout/attempt named in attrs over t. Naming only a
// different rollout clears the attempt (resolved to its running one).
func pick(t target, attrs pcommon.Map) target {
	r, hasR := attrs.Get(AttrRolloutID)
	a, hasA := attrs.Get(AttrAttemptID)
	if hasR && r.AsString() != "" && r.AsString() != t.rollout {
		t = target{rollout: r.AsString()}
	}
	if hasA && a.AsString() != "" {
		t.attempt = a.AsString()
	}
	return t
}

func spanData(sp ptrace.Span, resource map[string]any, scope Scope) SpanData {
	d := SpanData{
		TraceID:    sp.TraceID().String(),
		SpanID:     sp.SpanID().String(),
		Name:       sp.Name(),
		Kind:       strings.ToLower(sp.Kind().String()),
		Status:     Status{Code: statusCode(sp.Status().Code()), Message: sp.Status().Message()},
		Attributes: rawAttrs(sp.Attributes()),
		Resource:   resource,
		Scope:      scope,
	}
	if !sp.ParentSpanID().IsEmpty() {
		d.ParentSpanID = sp.ParentSpanID().String()
	}
	if sp.StartTimestamp() != 0 {
		d.Start = sp.StartTimestamp().AsTime().UTC()
	}
	if sp.EndTimestamp() != 0 {
		d.End = sp.EndTimestamp().AsTime().UTC()
	}
	if !d.Start.IsZero() && !d.End.IsZero() && d.End.After(d.Start) {
		d.DurationMS = math.Round(float64(d.End.Sub(d.Start))/float64(time.Microsecond)) / 1000
	}
	evs := sp.Events()
	for i := 0; i < evs.Len(); i++ {
		e := evs.At(i)
		d.Events = append(d.Events, SpanEvent{Name: e.Name(), Time: e.Timestamp().AsTime().UTC(), Attributes: rawAttrs(e.Attributes())})
	}
	links := sp.Links()
	for i := 0; i < links.Len(); i++ {
		l := links.At(i)
		d.Links = append(d.Links, SpanLink{TraceID: l.TraceID().String(), SpanID: l.SpanID().String(), Attributes: rawAttrs(l.Attributes())})
	}
	return d
}

func statusCode(c ptrace.StatusCode) string {
	switch c {
	case ptrace.StatusCodeOk:
		return "ok"
	case ptrace.StatusCodeError:
		return "error"
	}
	return "unset"
}

func rawAttrs(m pcommon.Map) map[string]any {
	if m.Len() == 0 {
		return nil
	}
	return m.AsRaw()
}

// attemptFromPath reads /r/{rollout}/{attempt}/v1/traces; /v1/traces names none.
func attemptFromPath(path string) (target, error) {
	if !strings.HasPrefix(path, "/r/") {
		return target{}, nil
	}
	parts := strings.Split(strings.TrimPrefix(path, "/r/"), "/")
	if len(parts) != 4 || parts[0] == "" || parts[1] == "" || parts[2] != "v1" || parts[3] != "traces" {
		return target{}, api.Errorf(http.StatusNotFound, "no_route", "no trace route %s: use /r/{rollout}/{attempt}/v1/traces", path)
	}
	return target{rollout: parts[0], attempt: parts[1]}, nil
}

// requestEncoding says whether the body is JSON (else protobuf).
func requestEncoding(r *http.Request) (isJSON bool, err error) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return false, api.Errorf(http.StatusUnsupportedMediaType, "unsupported_media_type", "Content-Type must be %s or %s", ContentTypeProtobuf, ContentTypeJSON)
	}
	switch mt {
	case ContentTypeProtobuf, "application/protobuf":
		return false, nil
	case ContentTypeJSON:
		return true, nil
	}
	return false, api.Errorf(http.StatusUnsupportedMediaType, "unsupported_media_type", "Content-Type %s: must be %s or %s", mt, ContentTypeProtobuf, ContentTypeJSON)
}

func encodingName(isJSON bool) string {
	if isJSON {
		return "JSON"
	}
	return "protobuf"
}

// readBody reads the (possibly gzip-compressed) body, bounded by maxBody.
func (h *handler) readBody(r *http.Request) ([]byte, error) {
	var src io.Reader = r.Body
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, api.Errorf(http.StatusBadRequest, "invalid_request", "malformed gzip body: %v", err)
		}
		defer zr.Close()
		src = zr
	default:
		return nil, api.Errorf(http.StatusUnsupportedMediaType, "unsupported_media_type", "Content-Encoding %s: use gzip or none", enc)
	}
	b, err := io.ReadAll(io.LimitReader(src, h.maxBody+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, api.Errorf(http.StatusRequestEntityTooLarge, "too_large", "request body over %d bytes", mbe.Limit)
		}
		if errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, api.Errorf(http.StatusBadRequest, "invalid_request", "malformed body: %v", err)
		}
		return nil, fmt.Errorf("read body: %w", err)
	}
	if int64(len(b)) > h.maxBody {
		return nil, api.Errorf(http.StatusRequestEntityTooLarge, "too_large", "request body over %d bytes", h.maxBody)
	}
	return b, nil
}

package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/aglrl/agl/engine"
	"github.com/aglrl/agl/engine/upstream"
	"github.com/aglrl/agl/internal/fastjson"
)

// errorStyle says which API's error body a route answers with.
type errorStyle uint8

const (
	styleOpenAI errorStyle = iota
	styleAnthropic
	styleGoogle
	// styleFastAPI is {"detail": message}, how Agent Lightning's server
	// (FastAPI's HTTPException) answers a refusal.
	styleFastAPI
)

// apiError is an error with an HTTP status, rendered in the caller's API
// shape: OpenAI {"error":{"message","type","param","code"}}, Anthropic
// {"type":"error","error":{"type","message"}} or Google
// {"error":{"code","message","status"}}.
type apiError struct {
	Status  int
	Message string
	// Param names the offending request field (OpenAI's param, Google's
	// field violation), if any.
	Param string
	// Code is OpenAI's machine-readable code, if any.
	Code string
	// RetryAfter, when > 0, is sent as a Retry-After header (seconds).
	RetryAfter int
	// Raw, when set, is the body as is: an upstream's error passed
	// through on a call marked WithVerbatim.
	Raw []byte
	// unrecorded marks a failure that leaves no record: on a call marked
	// WithVerbatim, an upstream that never answered (Agent Lightning's
	// proxy raises before it captures an event).
	unrecorded bool
}

func (e *apiError) Error() string { return e.Message }

// badRequest returns a 400 naming the offending parameter.
func badRequest(param, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Message: fmt.Sprintf(format, args...), Param: param}
}

// unsupported returns a 400 for a feature the gateway does not implement,
// rather than silently dropping it.
func unsupported(param, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Message: fmt.Sprintf(format, args...), Param: param, Code: "unsupported_parameter"}
}

// ErrUnsupported is returned (wrapped) by a Backend for a request it cannot
// serve as asked (stop strings on a token engine, …): the caller gets a 400.
var ErrUnsupported = errors.New("unsupported")

// ErrBadRequest is returned (wrapped) by a Backend for an invalid request
// (prompt longer than the context, …): the caller gets a 400.
var ErrBadRequest = errors.New("bad request")

func openAIType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusConflict:
		return "conflict_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status == http.StatusServiceUnavailable:
		return "service_unavailable_error"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

func anthropicType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// googleStatus is Google's canonical status name (google.rpc.Code) for an
// HTTP status.
func googleStatus(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "UNAUTHENTICATED"
	case http.StatusForbidden:
		return "PERMISSION_DENIED"
	case http.StatusNotFound:
		return "NOT_FOUND"
	case http.StatusConflict:
		return "ABORTED"
	case http.StatusRequestTimeout, http.StatusGatewayTimeout:
		return "DEADLINE_EXCEEDED"
	case http.StatusTooManyRequests:
		return "RESOURCE_EXHAUSTED"
	case 499:
		return "CANCELLED"
	case http.StatusNotImplemented:
		return "UNIMPLEMENTED"
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return "UNAVAILABLE"
	}
	if status >= 500 {
		return "INTERNAL"
	}
	return "INVALID_ARGUMENT"
}

// writeError writes e in the given style.
func writeError(w http.ResponseWriter, style errorStyle, e *apiError) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	w.WriteHeader(e.Status)
	w.Write(errorBody(style, e))
}

// errorBody is e's JSON body in the given style.
func errorBody(style errorStyle, e *apiError) []byte {
	if e.Raw != nil {
		return e.Raw
	}
	b := make([]byte, 0, 128+len(e.Message))
	if style == styleFastAPI {
		b = append(b, `{"detail":`...)
		b = fastjson.AppendString(b, e.Message)
		return append(b, '}')
	}
	if style == styleAnthropic {
		b = append(b, `{"type":"error","error":{"type":`...)
		b = strconv.AppendQuote(b, anthropicType(e.Status))
		b = append(b, `,"message":`...)
		b = fastjson.AppendString(b, e.Message)
		return append(b, "}}"...)
	}
	if style == styleGoogle {
		b = append(b, `{"error":{"code":`...)
		b = strconv.AppendInt(b, int64(e.Status), 10)
		b = append(b, `,"message":`...)
		b = fastjson.AppendString(b, e.Message)
		b = append(b, `,"status":`...)
		b = strconv.AppendQuote(b, googleStatus(e.Status))
		if e.Param != "" {
			b = append(b, `,"details":[{"@type":"type.googleapis.com/google.rpc.BadRequest","fieldViolations":[{"field":`...)
			b = fastjson.AppendString(b, e.Param)
			b = append(b, `,"description":`...)
			b = fastjson.AppendString(b, e.Message)
			b = append(b, "}]}]"...)
		}
		return append(b, "}}"...)
	}
	b = append(b, `{"error":{"message":`...)
	b = fastjson.AppendString(b, e.Message)
	b = append(b, `,"type":`...)
	b = strconv.AppendQuote(b, openAIType(e.Status))
	b = append(b, `,"param":`...)
	b = appendNullableString(b, e.Param)
	b = append(b, `,"code":`...)
	b = appendNullableString(b, e.Code)
	return append(b, "}}"...)
}

// appendSSEError appends e as a stream error event, for errors after a
// stream has started: OpenAI's (and Google's) data-only error object,
// Anthropic's "error" event.
func appendSSEError(b []byte, style errorStyle, e *apiError) []byte {
	if style == styleAnthropic {
		return appendSSEEvent(b, "error", errorBody(style, e))
	}
	return appendSSEData(b, errorBody(style, e))
}

func appendNullableString(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return fastjson.AppendString(b, s)
}

// verbatimKey marks a call whose upstream answers pass through; its
// value is the body to send upstream (nil: agl's).
type verbatimKey struct{}

// WithVerbatim marks a call (Agent Lightning's agent route, an OpenAI
// chat/completions or completions call) that reaches a chat-mode upstream
// (UpstreamBackend) as AL's proxy forwards it and whose answers come back
// as AL's proxy returns them: upstreamBody, when set, is the body sent
// upstream as is (AL's prepare_body: the caller's fields kept, no
// max_tokens bound); a non-streamed answer comes back with every field
// the upstream sent (Result.Raw; the record keeps agl's encoding); an
// error with the upstream's status and body instead of agl's normalised
// error (a JSON body verbatim, any other as {}, as AL answers a non-JSON
// body; the call's error record holds it).
func WithVerbatim(ctx context.Context, upstreamBody []byte) context.Context {
	if upstreamBody == nil {
		upstreamBody = []byte{}
	}
	return context.WithValue(ctx, verbatimKey{}, upstreamBody)
}

// verbatim reports whether ctx is marked WithVerbatim, and the body to
// send upstream (nil: agl's own).
func verbatim(ctx context.Context) (bool, []byte) {
	b, ok := ctx.Value(verbatimKey{}).([]byte)
	if len(b) == 0 {
		b = nil
	}
	return ok, b
}

// callStyle is the error style of a call of shape sh: on Agent
// Lightning's route (a call marked WithVerbatim) agl's own refusals are
// FastAPI's {"detail": …}, as AL answers its own (HTTPException).
func callStyle(ctx context.Context, sh *apiShape) errorStyle {
	if v, _ := verbatim(ctx); v {
		return styleFastAPI
	}
	return sh.style
}

// callError is backendError, with an upstream's error answer passed
// through on a call marked WithVerbatim.
func callError(ctx context.Context, err error) *apiError {
	var he *upstream.HTTPError
	if v, _ := verbatim(ctx); v && errors.As(err, &he) && he.Status >= 400 {
		body := bytes.TrimSpace(he.Body)
		if len(body) == 0 || !json.Valid(body) {
			body = []byte("{}")
		}
		return &apiError{Status: he.Status, Message: he.Message(), Raw: body}
	}
	if v, _ := verbatim(ctx); v && !errors.Is(err, ErrBadRequest) && !errors.Is(err, ErrUnsupported) && !errors.Is(err, engine.ErrInvalidPrompt) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, upstream.ErrNoEndpoints) {
		// No answer from the upstream after the retries: AL's proxy
		// raises HTTPException 504 on a timeout, else 502
		// (_send_upstream_with_retries, proxy.py lines 156-178).
		// It raises before _capture_event, so no model_request is
		// recorded either.
		e := &apiError{Status: http.StatusBadGateway, Message: "Upstream model server request failed", unrecorded: true}
		if errors.Is(err, context.DeadlineExceeded) {
			e = &apiError{Status: http.StatusGatewayTimeout, Message: "Upstream model server timed out", unrecorded: true}
		}
		e.Raw, _ = json.Marshal(map[string]string{"detail": e.Message})
		return e
	}
	return backendError(err)
}

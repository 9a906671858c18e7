package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

// httpError is an error with the status and code it answers with.
type httpError struct {
	status int
	code   string
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func errorf(status int, code, format string, args ...any) error {
	return &httpError{status: status, code: code, msg: fmt.Sprintf(format, args...)}
}

// writeError answers with the JSON error object {"error":{"code","message"}},
// mapping store sentinels to statuses. Unexpected errors are logged and
// answered 500 without their text.
func writeError(w http.ResponseWriter, log *slog.Logger, err error) {
	var he *httpError
	status, code, msg := http.StatusInternalServerError, "internal", "internal error"
	switch {
	case errors.As(err, &he):
		status, code, msg = he.status, he.code, he.msg
	case errors.Is(err, store.ErrInvalid):
		status, code, msg = http.StatusBadRequest, "invalid_request", err.Error()
	case errors.Is(err, store.ErrNotFound):
		status, code, msg = http.StatusNotFound, "not_found", err.Error()
	case errors.Is(err, store.ErrConflict):
		status, code, msg = http.StatusConflict, "conflict", err.Error()
	case errors.Is(err, store.ErrForbidden):
		status, code, msg = http.StatusForbidden, "forbidden", err.Error()
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		status, code, msg = http.StatusServiceUnavailable, "unavailable", "request cancelled: "+err.Error()
	default:
		log.Error("request failed", "err", err)
	}
	api.WriteJSON(w, status, api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: msg}})
}

// decode reads a JSON body into v strictly: unknown fields, trailing data,
// wrong types and oversized bodies are errors that name the problem.
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bodyError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return bodyError(err)
		}
		return errorf(http.StatusBadRequest, "invalid_json", "request body has data after the JSON value")
	}
	return nil
}

func bodyError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var mb *http.MaxBytesError
	switch {
	case errors.As(err, &mb):
		return errorf(http.StatusRequestEntityTooLarge, "too_large", "request body is larger than %d bytes", mb.Limit)
	case errors.Is(err, io.EOF):
		return errorf(http.StatusBadRequest, "invalid_json", "request body is empty; a JSON object is required")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(http.StatusBadRequest, "invalid_json", "request body is truncated JSON")
	case errors.As(err, &syn):
		return errorf(http.StatusBadRequest, "invalid_json", "malformed JSON at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "body"
		}
		return errorf(http.StatusBadRequest, "invalid_request", "field %q: expected %s, got JSON %s", field, typ.Type, typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return errorf(http.StatusBadRequest, "invalid_request", "%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return errorf(http.StatusBadRequest, "invalid_json", "cannot read body: %v", err)
}

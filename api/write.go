package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/aglrl/agl/store"
)

// WriteJSON writes v as the JSON body of a response with the given status
// (HTML characters unescaped), as every /api and dashboard route answers.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// Errorf returns an *Error, for a handler to answer with (WriteError).
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// WriteError answers with the JSON error object {"error":{"code","message"}}:
// an *Error with its status and code, store sentinels with theirs (400,
// 404, 409, 403), an ended request context with 503. Anything else is
// logged and answered 500 without its text.
func WriteError(w http.ResponseWriter, log *slog.Logger, err error) {
	var he *Error
	status, code, msg := http.StatusInternalServerError, "internal", "internal error"
	switch {
	case errors.As(err, &he):
		status, code, msg = he.Status, he.Code, he.Message
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
	WriteJSON(w, status, ErrorBody{Error: ErrorDetail{Code: code, Message: msg}})
}

package gateway

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/aglrl/agl/api"
)

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
		return api.Errorf(http.StatusBadRequest, "invalid_json", "request body has data after the JSON value")
	}
	return nil
}

func bodyError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var mb *http.MaxBytesError
	switch {
	case errors.As(err, &mb):
		return api.Errorf(http.StatusRequestEntityTooLarge, "too_large", "request body is larger than %d bytes", mb.Limit)
	case isTimeout(err):
		return api.Errorf(http.StatusRequestTimeout, "request_timeout", "request body did not arrive in time")
	case errors.Is(err, io.EOF):
		return api.Errorf(http.StatusBadRequest, "invalid_json", "request body is empty; a JSON object is required")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return api.Errorf(http.StatusBadRequest, "invalid_json", "request body is truncated JSON")
	case errors.As(err, &syn):
		return api.Errorf(http.StatusBadRequest, "invalid_json", "malformed JSON at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "body"
		}
		return api.Errorf(http.StatusBadRequest, "invalid_request", "field %q: expected %s, got JSON %s", field, typ.Type, typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return api.Errorf(http.StatusBadRequest, "invalid_request", "%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return api.Errorf(http.StatusBadRequest, "invalid_json", "cannot read body: %v", err)
}

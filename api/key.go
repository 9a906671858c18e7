package api

import (
	"errors"
	"net/http"
	"strings"
)

// ErrConflictingKeys is RequestKey's answer for a request whose
// Authorization and x-api-key headers carry different keys.
var ErrConflictingKeys = errors.New("Authorization and x-api-key carry different keys: send one key")

// RequestKey returns the key a request presents, the same way on every
// gateway route (/api, the dashboard's views, trace intake and the LLM
// routes): "Authorization: Bearer KEY" (another scheme is ignored) or
// "x-api-key: KEY". Both may be sent only with the same key; different
// keys are ErrConflictingKeys rather than one silently winning. No key
// is "", nil.
func RequestKey(r *http.Request) (string, error) {
	var bearer string
	if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		bearer = strings.TrimSpace(h[7:])
	}
	xkey := strings.TrimSpace(r.Header.Get("X-Api-Key"))
	switch {
	case bearer == "":
		return xkey, nil
	case xkey == "" || xkey == bearer:
		return bearer, nil
	}
	return "", ErrConflictingKeys
}

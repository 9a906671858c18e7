package api_test

import (
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/aglrl/agl/api"
)

func TestRequestKey(t *testing.T) {
	for _, tc := range []struct {
		name, auth, xkey, want string
		err                    error
	}{
		{"none", "", "", "", nil},
		{"bearer", "Bearer k1", "", "k1", nil},
		{"bearer, any case, spaces", "bEaReR   k1 ", "", "k1", nil},
		{"x-api-key", "", "k2", "k2", nil},
		{"both, same key", "Bearer k1", "k1", "k1", nil},
		{"both, different keys", "Bearer k1", "k2", "", api.ErrConflictingKeys},
		{"other scheme ignored", "Basic eDp5", "k2", "k2", nil},
		{"other scheme alone", "Basic eDp5", "", "", nil},
		{"empty bearer", "Bearer ", "k2", "k2", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			if tc.auth != "" {
				r.Header.Set("Authorization", tc.auth)
			}
			if tc.xkey != "" {
				r.Header.Set("x-api-key", tc.xkey)
			}
			got, err := api.RequestKey(r)
			if got != tc.want || !errors.Is(err, tc.err) {
				t.Errorf("got %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
		})
	}
}

package otlp_test

import (
	"crypto/subtle"
	"net/http"

	"github.com/aglrl/agl/otlp"
	"github.com/aglrl/agl/store"
)

// Mount the intake on a mux (or a *gateway.Server, which has the same
// Handle method), with the admin check for requests without a scoped key.
func ExampleMount() {
	var st store.Store // the gateway's store
	const adminKey = "secret"
	isAdmin := func(r *http.Request) bool {
		return subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+adminKey)) == 1
	}
	mux := http.NewServeMux()
	otlp.Mount(mux, otlp.NewHandler(st, otlp.WithAuthorize(isAdmin)))
	// Output:
}

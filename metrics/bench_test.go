package metrics_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aglrl/agl/metrics"
)

func BenchmarkObserveCall(b *testing.B) {
	m := metrics.New(metrics.Options{})
	b.ReportAllocs()
	for b.Loop() {
		done := m.InFlight("chat.completions")
		m.ObserveCall("chat.completions", 200, 150*time.Millisecond, 1200, 300)
		done()
	}
}

// BenchmarkMiddleware is the per-request cost the middleware adds around a
// handler that does nothing.
func BenchmarkMiddleware(b *testing.B) {
	m := metrics.New(metrics.Options{})
	h := m.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	req := httptest.NewRequest("POST", "/r/rollout-1/attempt-1/v1/chat/completions", nil)
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, req)
	}
}

package otlp_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/aglrl/agl/otlp"
)

// BenchmarkIntake posts 100-span protobuf requests for one running attempt
// through the handler into sqlite; spans/s is the figure to read.
func BenchmarkIntake(b *testing.B) {
	e := newEnvTB(b)
	cl := e.claims[0]
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "bench")
	ss := rs.ScopeSpans().AppendEmpty()
	for i := range 100 {
		sp := ss.Spans().AppendEmpty()
		sp.SetTraceID(pcommon.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
		sp.SetSpanID(pcommon.SpanID{1, 0, 0, 0, 0, 0, byte(i >> 8), byte(i) + 1})
		sp.SetName(fmt.Sprintf("tool.call.%d", i))
		sp.SetStartTimestamp(1700000000000000000)
		sp.SetEndTimestamp(1700000000500000000)
		sp.Attributes().PutStr("tool.name", "search")
		sp.Attributes().PutInt("tokens", 123)
	}
	body, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	if err != nil {
		b.Fatal(err)
	}
	url := "/r/r0/" + cl.Attempt.ID + "/v1/traces"
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		req := httptest.NewRequest("POST", url, bytes.NewReader(body))
		req.Header.Set("Content-Type", otlp.ContentTypeProtobuf)
		req.Header.Set("Authorization", "Bearer "+cl.Key)
		w := httptest.NewRecorder()
		e.handler.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "spans/s")
}

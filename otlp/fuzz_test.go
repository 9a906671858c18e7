package otlp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"unicode/utf8"

	"github.com/aglrl/agl/otlp"
	"github.com/aglrl/agl/store"
)

// FuzzTracesJSON posts arbitrary OTLP/JSON bodies, with the admin key and
// with an attempt's scoped key on its path: no crash, no 5xx (the store
// never fails here), a JSON answer, and every stored span event valid
// UTF-8 JSON.
func FuzzTracesJSON(f *testing.F) {
	e := newEnvTB(f)
	cl := e.claims[0]
	for _, s := range [][]byte{
		jsonSpans("r0", cl.Attempt.ID, "eee19b7ec3c1b174"),
		join(jsonSpans("r0", cl.Attempt.ID, "0000000000000001"), jsonSpans("", "", "0000000000000003"), jsonSpans("rq", "", "0000000000000004")),
		jsonSpans("", "", "aaa19b7ec3c1b174"),
		[]byte(`{"resourceSpans":[]}`), []byte(`{"resourceSpans":5}`), []byte(`{"resourceSpans":[{`),
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	var seq int64
	f.Fuzz(func(t *testing.T, body []byte, scoped bool) {
		path, key := "/v1/traces", adminKey
		if scoped {
			path, key = "/r/r0/"+cl.Attempt.ID+"/v1/traces", cl.Key
		}
		req := httptest.NewRequest("POST", path, bytes.NewReader(body))
		req.Header.Set("Content-Type", otlp.ContentTypeJSON)
		req.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		e.handler.ServeHTTP(w, req)
		if w.Code >= 500 || !json.Valid(w.Body.Bytes()) {
			t.Fatalf("%q: %d %q", body, w.Code, w.Body.Bytes())
		}
		last := seq
		for _, rid := range []string{"r0", "r1"} {
			evs, err := e.st.ListEvents(context.Background(), store.EventFilter{RolloutID: rid, AfterSeq: seq, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs {
				if !utf8.Valid(ev.Data) || !json.Valid(ev.Data) {
					t.Fatalf("%q: stored span is not UTF-8 JSON: %q", body, ev.Data)
				}
				last = max(last, ev.Seq)
			}
		}
		seq = last
	})
}

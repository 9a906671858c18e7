package metrics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/metrics"
	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/sqlite"
)

// TestStoreObserverCountsEveryWrite: a SQLite store observed by the
// metrics counts what goes through each write path once: events recorded
// through the event journal (or, with synchronous FULL and no journal,
// appended), appended late, and the model calls they describe.
func TestStoreObserverCountsEveryWrite(t *testing.T) {
	for _, tc := range []struct {
		name, sync string
	}{
		{"journal", ""},
		{"no journal", "FULL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			m := metrics.New(metrics.Options{CallsFromEvents: true})
			st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "agl.db"), sqlite.Options{Synchronous: tc.sync, Observer: m})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if _, err := st.CreateRollouts(ctx, []store.NewRollout{{ID: "r1"}}); err != nil {
				t.Fatal(err)
			}
			cl, err := st.Claim(ctx, store.ClaimRequest{WorkerID: "w"})
			if err != nil {
				t.Fatal(err)
			}
			call, _ := json.Marshal(api.ModelCall{CallID: "c1", API: api.ShapeChatCompletions, PromptIDs: []int32{1, 2}, ResponseIDs: []int32{3},
				Usage: api.Usage{PromptTokens: 2, CompletionTokens: 1}, LatencyMS: 5})
			// The gateway's events come with their layout (the summary
			// skips the ids and request); a wrong one costs nothing.
			at := func(key string, n int) [2]int {
				i := bytes.Index(call, []byte(`"`+key+`":`)) + len(key) + 3
				return [2]int{i, i + n}
			}
			right := &store.CallLayout{PromptIDs: at("prompt_ids", len("[1,2]")), ResponseIDs: at("response_ids", len("[3]"))}
			wrong := &store.CallLayout{PromptIDs: [2]int{5, 3}}
			broken := &store.CallLayout{PromptIDs: [2]int{0, 1}} // the summary would not parse
			for _, lay := range []*store.CallLayout{right, wrong, broken, nil} {
				if err := st.RecordEvents(ctx, "r1", cl.Attempt.ID, []store.NewEvent{{Type: store.EventModelRequest, Data: call, Layout: lay}}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := st.CompleteAttempt(ctx, "r1", cl.Attempt.ID, store.AttemptSucceeded, ""); err != nil {
				t.Fatal(err)
			}
			if _, err := st.AppendLateEvents(ctx, "r1", cl.Attempt.ID, []store.NewEvent{{Type: "late", Data: json.RawMessage(`{}`)}}); err != nil {
				t.Fatal(err)
			}
			evs, err := st.ListEvents(ctx, store.EventFilter{RolloutID: "r1"})
			if err != nil || len(evs) == 0 || string(evs[0].Data) != string(call) {
				t.Fatalf("events %v, %v", evs, err)
			}
			srv := httptest.NewServer(m.Handler())
			defer srv.Close()
			fams := scrape(t, srv)
			want := map[string]float64{store.EventModelRequest: 4, "late": 1}
			for typ, n := range want {
				if got, _ := value(t, fams, "agl_events_appended_total", map[string]string{"type": typ}); got != n {
					t.Errorf("events of type %s counted %v, want %v", typ, got, n)
				}
			}
			if got, _ := value(t, fams, "agl_model_calls_total", map[string]string{"api": api.ShapeChatCompletions}); got != 4 {
				t.Errorf("model calls counted %v, want 4", got)
			}
			if got, _ := value(t, fams, "agl_tokens_total", map[string]string{"direction": "in"}); got != 8 {
				t.Errorf("prompt tokens counted %v, want 8", got)
			}
		})
	}
}

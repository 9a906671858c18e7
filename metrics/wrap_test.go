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

// spyStore is a SQLite store that counts the events made durable through
// its event journal (RecordEvents).
type spyStore struct {
	*sqlite.Store
	recorded int
}

func (s *spyStore) RecordEvents(ctx context.Context, rid, aid string, evs []store.NewEvent) error {
	s.recorded += len(evs)
	return s.Store.RecordEvents(ctx, rid, aid, evs)
}

// bareStore has only the store.Store methods, none of the optional ones.
type bareStore struct{ store.Store }

// TestWrapStoreKeepsOptionalInterfaces: the wrapped store has exactly the
// optional interfaces of the store it wraps (a proxy given it still
// writes through the SQLite journal, `agl store prune` and the Agent
// Lightning routes still find theirs), and what goes through them is
// counted.
func TestWrapStoreKeepsOptionalInterfaces(t *testing.T) {
	for _, tc := range []struct {
		name      string
		wrapped   func(*spyStore) store.Store
		late, prn bool
		journaled int // events the spy saw recorded
	}{
		{"sqlite", func(s *spyStore) store.Store { return s }, true, true, 4},
		{"bare", func(s *spyStore) store.Store { return bareStore{s} }, false, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			sq, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "agl.db"), sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer sq.Close()
			spy := &spyStore{Store: sq}
			m := metrics.New(metrics.Options{CallsFromEvents: true})
			st := m.WrapStore(tc.wrapped(spy))
			if _, ok := st.(store.LateWriter); ok != tc.late {
				t.Errorf("wrapped store is a LateWriter: %v, want %v", ok, tc.late)
			}
			if _, ok := st.(store.Pruner); ok != tc.prn {
				t.Errorf("wrapped store is a Pruner: %v, want %v", ok, tc.prn)
			}
			rec, ok := st.(store.EventRecorder)
			if !ok {
				t.Fatal("wrapped store is not an EventRecorder")
			}
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
				if err := rec.RecordEvents(ctx, "r1", cl.Attempt.ID, []store.NewEvent{{Type: store.EventModelRequest, Data: call, Layout: lay}}); err != nil {
					t.Fatal(err)
				}
			}
			if spy.recorded != tc.journaled {
				t.Errorf("%d events went through the journal, want %d", spy.recorded, tc.journaled)
			}
			if lw, ok := st.(store.LateWriter); ok {
				if _, err := st.CompleteAttempt(ctx, "r1", cl.Attempt.ID, store.AttemptSucceeded, ""); err != nil {
					t.Fatal(err)
				}
				if _, err := lw.AppendLateEvents(ctx, "r1", cl.Attempt.ID, []store.NewEvent{{Type: "late", Data: json.RawMessage(`{}`)}}); err != nil {
					t.Fatal(err)
				}
			}
			evs, err := st.ListEvents(ctx, store.EventFilter{RolloutID: "r1"})
			if err != nil || len(evs) == 0 || string(evs[0].Data) != string(call) {
				t.Fatalf("events %v, %v", evs, err)
			}
			srv := httptest.NewServer(m.Handler())
			defer srv.Close()
			fams := scrape(t, srv)
			want := map[string]float64{store.EventModelRequest: 4}
			if tc.late {
				want["late"] = 1
			}
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

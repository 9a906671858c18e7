package postgres_test

import (
	"context"
	"testing"

	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/postgres"
	"github.com/aglrl/agl/store/storetest"
)

// TestEventEncodingAcrossVersions writes one attempt's calls through
// stores of alternating PlainEvents (rows as stores before schema version
// 3 wrote them, and encoded ones); a store that wrote none of them (a
// cold base cache: another process) reads every event back exactly, and
// the encoded rows take a fraction of the space.
func TestEventEncodingAcrossVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	calls, final := storetest.Conversation([]string{""}, 60, 8192)
	for _, tc := range []struct {
		name   string
		phases []bool
		ratio  float64
	}{
		{"plain then encoded", []bool{true, false}, 0},
		{"encoded by three stores", []bool{false, false, false}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := testURL(t)
			var aid string
			per := len(calls) / len(tc.phases)
			for p, plain := range tc.phases {
				s, err := postgres.OpenOptions(ctx, url, postgres.Options{PlainEvents: plain})
				if err != nil {
					t.Fatal(err)
				}
				if p == 0 {
					if _, err := s.CreateRollouts(ctx, []store.NewRollout{{ID: "r"}}); err != nil {
						t.Fatal(err)
					}
					cl, err := s.Claim(ctx, store.ClaimRequest{WorkerID: "w"})
					if err != nil {
						t.Fatal(err)
					}
					aid = cl.Attempt.ID
				}
				for _, d := range calls[p*per : (p+1)*per] {
					if _, err := s.AppendEvents(ctx, "r", aid, []store.NewEvent{{Type: store.EventModelRequest, Data: d, DataValid: true}}); err != nil {
						t.Fatal(err)
					}
				}
				s.Close()
			}
			s, err := postgres.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			evs, err := s.ListEvents(ctx, store.EventFilter{RolloutID: "r"})
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != len(calls) {
				t.Fatalf("%d events, want %d", len(evs), len(calls))
			}
			for i, e := range evs {
				if string(e.Data) != string(calls[i]) {
					t.Fatalf("event %d reads back different from what was written", i)
				}
			}
			var stored int64
			if err := s.Pool().QueryRow(ctx, `SELECT SUM(LENGTH(data)) FROM events`).Scan(&stored); err != nil {
				t.Fatal(err)
			}
			r := float64(stored) / float64(len(final))
			t.Logf("stored %d bytes of events, %.2f× the final conversation (%d bytes)", stored, r, len(final))
			if tc.ratio > 0 && r > tc.ratio {
				t.Errorf("events take %.2f× the final conversation, want at most %.1f×", r, tc.ratio)
			}
		})
	}
}

package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aglrl/agl/store"
)

// BenchOpener returns a fresh, empty store for a benchmark.
type BenchOpener func(b *testing.B) store.Store

// Bench runs the store benchmarks: events appended per second (batches of
// 100 from 10 concurrent writers; single events, as the gateway appends
// one per model call, from 1 and 32 concurrent writers) and full rollout
// lifecycles per second (create → claim → 4 events → complete, 8
// concurrent workers).
func Bench(b *testing.B, open BenchOpener) {
	b.Run("AppendEvents/batch100/writers10", func(b *testing.B) { benchAppend(b, open(b), 10, 100) })
	b.Run("AppendEvents/batch1/writers1", func(b *testing.B) { benchAppend(b, open(b), 1, 1) })
	b.Run("AppendEvents/batch1/writers32", func(b *testing.B) { benchAppend(b, open(b), 32, 1) })
	b.Run("Lifecycle/workers8", func(b *testing.B) { benchLifecycle(b, open(b)) })
}

var payload = json.RawMessage(`{"api":"chat.completions","model":"m","model_version":3,"prompt_ids":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16],"response_ids":[17,18,19,20],"response_logprobs":[-0.1,-0.2,-0.3,-0.4]}`)

func benchAppend(b *testing.B, s store.Store, writers, batch int) {
	ctx := context.Background()
	type att struct{ r, a string }
	atts := make([]att, writers)
	for w := range atts {
		id := fmt.Sprint("bench-", w)
		if _, err := s.CreateRollouts(ctx, []store.NewRollout{{ID: id, Config: store.RolloutConfig{UnresponsiveSeconds: 3600}}}); err != nil {
			b.Fatal(err)
		}
		c, err := s.Claim(ctx, store.ClaimRequest{WorkerID: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		atts[w] = att{c.Rollout.ID, c.Attempt.ID}
	}
	evs := make([]store.NewEvent, batch)
	for i := range evs {
		evs[i] = store.NewEvent{Type: store.EventModelRequest, Data: payload}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	b.ResetTimer()
	start := time.Now()
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(a att) {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if _, err := s.AppendEvents(ctx, a.r, a.a, evs); err != nil {
					errs <- err
					return
				}
			}
		}(atts[w])
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N*batch)/el.Seconds(), "events/s")
}

func benchLifecycle(b *testing.B, s store.Store) {
	ctx := context.Background()
	const workers = 8
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	evs := make([]store.NewEvent, 4)
	for i := range evs {
		evs[i] = store.NewEvent{Type: store.EventModelRequest, Data: payload}
	}
	evs[3] = store.NewEvent{Type: store.EventReward, Data: json.RawMessage(`{"value":1}`)}
	b.ResetTimer()
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				err := func() error {
					id := fmt.Sprintf("lc-%d", i)
					if _, err := s.CreateRollouts(ctx, []store.NewRollout{{ID: id}}); err != nil {
						return err
					}
					c, err := s.Claim(ctx, store.ClaimRequest{WorkerID: fmt.Sprint("w", w)})
					if err != nil {
						return err
					}
					if _, err := s.AppendEvents(ctx, c.Rollout.ID, c.Attempt.ID, evs); err != nil {
						return err
					}
					_, err = s.CompleteAttempt(ctx, c.Rollout.ID, c.Attempt.ID, store.AttemptSucceeded, "")
					return err
				}()
				if err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "lifecycles/s")
}

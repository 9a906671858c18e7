package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aglrl/agl/dashboard"
	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/postgres/pgtest"
	"github.com/aglrl/agl/store/sqlite"
)

// BenchmarkRolloutList measures the dashboard's rollouts list API over HTTP
// at 100k stored rollouts (AGL_BENCH_ROLLOUTS overrides the count): the
// first page, a deep page (page 1000 of 50, by cursor), filtered queries,
// and the state view the page polls. It reports p50 and p99 latency per
// query. The fill goes through the Store API: every rollout is created with
// a step, and 95% run an attempt that reports a reward and ends (one in
// seven failed).
//
//	go test -run '^$' -bench RolloutList -benchtime 300x ./dashboard/
//	scripts/with-postgres.sh go test -run '^$' -bench RolloutList/postgres -benchtime 300x ./dashboard/
func BenchmarkRolloutList(b *testing.B) {
	n := 100_000
	if v := os.Getenv("AGL_BENCH_ROLLOUTS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	b.Run("sqlite", func(b *testing.B) {
		st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "agl.db"), sqlite.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		benchList(b, st, n)
	})
	b.Run("postgres", func(b *testing.B) { benchList(b, pgtest.Open(b), n) })
}

// reward is a deterministic pseudo-random reward in [0, 1).
func reward(i int) float64 { return float64((i*2654435761)%1000003) / 1000003 }

func fillBench(b *testing.B, st store.Store, n int) time.Duration {
	ctx := context.Background()
	start := time.Now()
	const batch = 1000
	for i := 0; i < n; i += batch {
		var rs []store.NewRollout
		for j := i; j < min(i+batch, n); j++ {
			step := j / 256
			mode := store.ModeTrain
			if j%5 == 4 {
				mode = store.ModeVal
			}
			rs = append(rs, store.NewRollout{ID: fmt.Sprintf("b%06d", j), GroupID: fmt.Sprintf("s%d-t%d", step, j%256/8), Mode: mode,
				Task: json.RawMessage(fmt.Sprintf(`{"question":"What is %d + %d?","answer":%d}`, j, j+1, 2*j+1)), Metadata: json.RawMessage(fmt.Sprintf(`{"step":%d}`, step))})
		}
		if _, err := st.CreateRollouts(ctx, rs); err != nil {
			b.Fatal(err)
		}
	}
	run := n * 95 / 100
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	var mu sync.Mutex
	next := 0
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= run {
					return
				}
				c, err := st.Claim(ctx, store.ClaimRequest{WorkerID: fmt.Sprint("bench-", i%8)})
				if err == nil {
					_, err = st.AppendEvents(ctx, c.Rollout.ID, c.Attempt.ID, []store.NewEvent{{Type: store.EventReward,
						Data: json.RawMessage(fmt.Sprintf(`{"value":%g}`, reward(i)))}})
				}
				if err == nil {
					status := store.AttemptSucceeded
					if i%7 == 3 {
						status = store.AttemptFailed
					}
					_, err = st.CompleteAttempt(ctx, c.Rollout.ID, c.Attempt.ID, status, "")
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	return time.Since(start)
}

func benchList(b *testing.B, st store.Store, n int) {
	took := fillBench(b, st, n)
	b.Logf("filled %d rollouts in %s", n, took.Round(time.Millisecond))
	d := dashboard.New(dashboard.Options{Store: st, AdminKey: admin, Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	var first dashboard.RolloutsPage
	getPage(b, srv.URL+"/api/dashboard/rollouts?limit=50", &first)
	top := first.Rollouts[0].Seq
	deep := top - 50*1000 // the cursor of page 1001: 50,000 rollouts down
	if deep < top/2 {
		deep = top / 2 // a smaller fill (AGL_BENCH_ROLLOUTS): half way down
	}
	midStep := (n / 256) / 2
	queries := []struct{ name, q string }{
		{"first_page", "limit=50"},
		{"deep_page_1000", fmt.Sprintf("limit=50&cursor=%d", deep)},
		{"step", fmt.Sprintf("limit=50&step=%d", midStep)},
		{"status_failed", "limit=50&status=failed"},
		{"status_failed_deep", fmt.Sprintf("limit=50&status=failed&cursor=%d", deep)},
		{"status_succeeded_or_failed_deep", fmt.Sprintf("limit=50&status=succeeded,failed&cursor=%d", deep)},
		{"status_queuing_or_running", "limit=50&status=queuing,running"},
		{"group", fmt.Sprintf("limit=50&group=s%d-t3", midStep)},
		{"val_reward_over_0.9", "limit=50&mode=val&min_reward=0.9"},
		{"reward_0.5_to_0.51_deep", fmt.Sprintf("limit=50&min_reward=0.5&max_reward=0.51&cursor=%d", deep)},
		{"step_status_reward", fmt.Sprintf("limit=50&step=%d&status=succeeded&min_reward=0.5", midStep)},
	}
	for _, q := range queries {
		b.Run(q.name, func(b *testing.B) {
			url := srv.URL + "/api/dashboard/rollouts?" + q.q
			var page dashboard.RolloutsPage
			getPage(b, url, &page)
			if len(page.Rollouts) == 0 {
				b.Fatalf("%s: empty page", q.q)
			}
			measure(b, url)
		})
	}
	b.Run("state", func(b *testing.B) { measure(b, srv.URL+"/api/dashboard/state") })
	b.Run("workers_10m", func(b *testing.B) { measure(b, srv.URL+"/api/dashboard/workers") })
}

func getPage(b *testing.B, url string, out any) {
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		b.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		b.Fatal(err)
	}
}

// measure GETs url once per iteration and reports p50 and p99 latency.
func measure(b *testing.B, url string) {
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	var lat []time.Duration
	for b.Loop() {
		t0 := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

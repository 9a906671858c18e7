//go:build unix

package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aglrl/agl/controller"
	"github.com/aglrl/agl/store"
)

// BenchmarkAttempt measures the controller's cost per rollout with a harness
// that does nothing (`true`) and writes no output: claim, temp files,
// process start, wait, completion, through a real gateway and SQLite store.
// ns/op is wall time per rollout at that concurrency.
func BenchmarkAttempt(b *testing.B) {
	for _, conc := range []int{1, 4} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			e := newEnv(b, -1)
			e.create(b, b.N, store.RolloutConfig{}, `{}`)
			cfg := e.config("true")
			cfg.Concurrency = conc
			cfg.PollInterval = 5 * time.Millisecond
			b.ResetTimer()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- controller.Run(ctx, cfg) }()
			for {
				// Rollouts are claimed oldest first; wait for all.
				c, err := e.st.CountRollouts(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				if int(c[store.RolloutSucceeded]) == b.N {
					break
				}
				time.Sleep(2 * time.Millisecond)
			}
			b.StopTimer()
			cancel()
			<-done
		})
	}
}

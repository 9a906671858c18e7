package postgres_test

import (
	"context"
	"testing"

	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/postgres"
	"github.com/aglrl/agl/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store { return newTestStore(t) })
}

// BenchmarkStore measures events appended per second (batches of 100, 10
// concurrent writers) and rollout lifecycles per second (create → claim →
// 4 events → complete) on the database AGL_TEST_POSTGRES_URL names:
//
//	scripts/with-postgres.sh go test -run '^$' -bench . ./store/postgres/
func BenchmarkStore(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) store.Store {
		s, err := postgres.Open(context.Background(), testURL(b))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	})
}

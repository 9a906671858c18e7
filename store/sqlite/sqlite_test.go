package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/sqlite"
	"github.com/aglrl/agl/store/storetest"
)

func open(t testing.TB) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "agl.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t) })
}

func TestBadSynchronous(t *testing.T) {
	_, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "x.db"), sqlite.Options{Synchronous: "OFF"})
	if err == nil {
		t.Fatal("synchronous OFF accepted")
	}
}

func BenchmarkStore(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) store.Store { return open(b) })
}

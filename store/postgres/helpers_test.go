package postgres_test

import (
	"testing"

	"github.com/aglrl/agl/store/postgres"
	"github.com/aglrl/agl/store/postgres/pgtest"
)

func testURL(tb testing.TB) string { return pgtest.URL(tb) }

func newTestStore(tb testing.TB) *postgres.Store { return pgtest.Open(tb) }

package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

// EnvURL names the variable holding the test database URL.
const EnvURL = "AGL_TEST_POSTGRES_URL"

// testURL returns a URL for a fresh schema of the test database, dropped
// when tb ends; it skips tb when AGL_TEST_POSTGRES_URL is unset.
func testURL(tb testing.TB) string {
	tb.Helper()
	base := os.Getenv(EnvURL)
	if base == "" {
		tb.Skip(EnvURL + " is unset; run under scripts/with-postgres.sh to test against a throwaway PostgreSQL cluster")
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatal(err)
	}
	schema := "agl_test_" + hex.EncodeToString(b[:])
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatalf("parse %s: %v", EnvURL, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	tb.Cleanup(func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return u.String()
}

// newTestStore opens a store on a fresh schema, closed when tb ends.
func newTestStore(tb testing.TB) *Store {
	tb.Helper()
	s, err := Open(context.Background(), testURL(tb))
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// Package pgtest gives tests a fresh PostgreSQL schema on the database named
// by AGL_TEST_POSTGRES_URL (scripts/with-postgres.sh sets it up), so tests
// can run in parallel and repeatedly against one throwaway cluster.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/aglrl/agl/store/postgres"
)

// EnvURL names the variable holding the test database URL.
const EnvURL = "AGL_TEST_POSTGRES_URL"

// URL returns a URL selecting a fresh schema (search_path) of the test
// database; the schema is dropped when tb ends. It skips tb when
// AGL_TEST_POSTGRES_URL is unset, and in the short lane (go test -short,
// SQLite only).
func URL(tb testing.TB) string {
	tb.Helper()
	if testing.Short() {
		tb.Skip("short lane: PostgreSQL runs in the full lane (scripts/test.sh)")
	}
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

// Open opens a store on a fresh schema, closed when tb ends (before the
// schema is dropped).
func Open(tb testing.TB) *postgres.Store {
	tb.Helper()
	s, err := postgres.Open(context.Background(), URL(tb))
	if err != nil {
		tb.Fatalf("postgres.Open: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

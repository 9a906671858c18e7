package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/aglrl/agl/config"
	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/postgres"
	"github.com/aglrl/agl/store/sqlite"
)

// OpenStore opens the configured store backend for writing, its writes
// observed by obs (nil: none): a SQLite store holds its data dir's lock
// until closed (one writer per data dir).
func OpenStore(ctx context.Context, c config.Config, log *slog.Logger, obs store.Observer) (store.Store, error) {
	if p, ok := c.StorePath(); ok {
		return sqlite.Open(ctx, p, sqlite.Options{Synchronous: c.Store.Synchronous, Logger: log, Observer: obs})
	}
	u := c.Store.URL
	if strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") {
		return postgres.OpenOptions(ctx, u, postgres.Options{Observer: obs})
	}
	return nil, fmt.Errorf("store URL %q: want sqlite:PATH or postgres://…", RedactURL(u))
}

// OpenReadStore opens the configured store for a command that only
// reads: SQLite read-only, beside a gateway or trainer that may be
// writing the same data dir, without taking its lock or touching its
// event journal. It says so on stderr when the journal holds events not
// yet in the database (which such a reader does not see).
func OpenReadStore(ctx context.Context, c config.Config, cmd string, stderr io.Writer, log *slog.Logger) (store.Store, error) {
	p, ok := c.StorePath()
	if !ok {
		return OpenStore(ctx, c, log, nil)
	}
	st, err := sqlite.Open(ctx, p, sqlite.Options{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	n, err := st.JournalBacklog(ctx)
	if err != nil {
		st.Close()
		return nil, err
	}
	if n > 0 {
		fmt.Fprintf(stderr, "agl %s: read %s read-only, leaving its event journal to its writer; the journal holds %d bytes of events not yet in the database, which this read does not see (a running gateway applies them within milliseconds, a stopped one when it starts again)\n", cmd, p, n)
	}
	return st, nil
}

// RedactURL hides a password in a URL for messages.
func RedactURL(u string) string {
	if at := strings.LastIndex(u, "@"); at > 0 {
		if i := strings.Index(u, "://"); i > 0 && i < at {
			return u[:i+3] + "…" + u[at:]
		}
	}
	return u
}

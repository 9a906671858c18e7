package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aglrl/agl/store"
)

// changesChannel is the NOTIFY channel of every agl store in a database;
// the payload is the schema the change was committed in (current_schema()),
// so deployments sharing a database in different schemas wake only their
// own waiters.
const changesChannel = "agl_changes"

// notifySQL wakes every replica's waiters at commit: run it in the
// transaction of a write that may end a wait.
const notifySQL = "SELECT pg_notify('" + changesChannel + "', current_schema())"

// notify runs notifySQL in tx.
func notify(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, notifySQL); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	return nil
}

// changes is the LISTEN side: one dedicated connection, started by the
// first Changed call, reconnecting with backoff until the store closes.
type changes struct {
	mu      sync.Mutex
	ch      chan struct{}
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
}

func (c *changes) broadcast() {
	c.mu.Lock()
	if c.ch != nil {
		close(c.ch)
		c.ch = nil
	}
	c.mu.Unlock()
}

func (c *changes) stop() {
	c.mu.Lock()
	cancel, done := c.cancel, c.done
	c.cancel = nil
	c.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	c.broadcast()
}

// Changed implements store.Shared.
func (s *Store) Changed() <-chan struct{} {
	c := &s.chg
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	if !c.started && !s.closed.Load() {
		c.started = true
		ctx, cancel := context.WithCancel(context.Background())
		c.cancel, c.done = cancel, make(chan struct{})
		go s.listen(ctx, c.done)
	}
	return c.ch
}

// ListenerName is the application_name of the listening connection (as
// pg_stat_activity shows it).
const ListenerName = "agl listen"

// Listener backoff bounds: a lost connection is retried after
// listenMinBackoff, doubling up to listenMaxBackoff.
const (
	listenMinBackoff = 100 * time.Millisecond
	listenMaxBackoff = 5 * time.Second
)

func (s *Store) listen(ctx context.Context, done chan struct{}) {
	defer close(done)
	backoff := listenMinBackoff
	for ctx.Err() == nil {
		connected, _ := s.listenOnce(ctx)
		// Whatever was committed while no connection listened is seen by
		// the waiters' next check.
		s.chg.broadcast()
		if connected {
			backoff = listenMinBackoff
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, listenMaxBackoff)
	}
}

// listenOnce connects, LISTENs and wakes waiters on each notification of
// this store's schema until the connection fails or ctx ends.
func (s *Store) listenOnce(ctx context.Context) (connected bool, err error) {
	cc := s.pool.Config().ConnConfig.Copy()
	cc.RuntimeParams["application_name"] = ListenerName
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var schema string
	if err := conn.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return false, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+changesChannel); err != nil {
		return false, err
	}
	// Listening now: changes committed before are seen by a re-check.
	s.chg.broadcast()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		if n.Payload == schema {
			s.chg.broadcast()
		}
	}
}

// PutSetting implements store.Shared.
func (s *Store) PutSetting(ctx context.Context, name string, value json.RawMessage) error {
	if name == "" || len(name) > store.MaxIDLen {
		return store.Errorf(store.ErrInvalid, "setting name must be 1 to %d bytes", store.MaxIDLen)
	}
	if !json.Valid(value) {
		return store.Errorf(store.ErrInvalid, "setting %s: value is not valid JSON", name)
	}
	return dbErr("put setting", s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO settings (name, value, version, updated_at) VALUES ($1, $2, 1, $3)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value, version = settings.version + 1, updated_at = excluded.updated_at`,
			name, []byte(value), now()); err != nil {
			return err
		}
		return notify(ctx, tx)
	}))
}

// Setting implements store.Shared.
func (s *Store) Setting(ctx context.Context, name string) (json.RawMessage, int64, error) {
	if err := s.check(); err != nil {
		return nil, 0, err
	}
	var v []byte
	var ver int64
	err := s.pool.QueryRow(ctx, "SELECT value, version FROM settings WHERE name = $1", name).Scan(&v, &ver)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, dbErr("setting", err)
	}
	return json.RawMessage(v), ver, nil
}

// PutReplica implements store.Shared.
func (s *Store) PutReplica(ctx context.Context, r store.Replica) error {
	if r.ID == "" || len(r.ID) > store.MaxIDLen {
		return store.Errorf(store.ErrInvalid, "replica id must be 1 to %d bytes", store.MaxIDLen)
	}
	return dbErr("put replica", s.retry(func() error {
		_, err := s.pool.Exec(ctx, `INSERT INTO replicas (id, paused, in_flight, reports, seen_at) VALUES ($1, $2, $3, 1, now())
			ON CONFLICT (id) DO UPDATE SET paused = excluded.paused, in_flight = excluded.in_flight,
				reports = replicas.reports + 1, seen_at = excluded.seen_at`, r.ID, r.Paused, int32(r.InFlight))
		return err
	}))
}

// Replicas implements store.Shared.
func (s *Store) Replicas(ctx context.Context, within time.Duration) ([]store.Replica, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT id, paused, in_flight, reports, seen_at FROM replicas
		WHERE seen_at > now() - make_interval(secs => $1) ORDER BY id`, within.Seconds())
	if err != nil {
		return nil, dbErr("replicas", err)
	}
	out := []store.Replica{}
	for rows.Next() {
		var r store.Replica
		var n int32
		if err := rows.Scan(&r.ID, &r.Paused, &n, &r.Reports, &r.SeenAt); err != nil {
			rows.Close()
			return nil, dbErr("replicas", err)
		}
		r.InFlight, r.SeenAt = int(n), r.SeenAt.UTC()
		out = append(out, r)
	}
	rows.Close()
	return out, dbErr("replicas", rows.Err())
}

// DeleteReplica implements store.Shared.
func (s *Store) DeleteReplica(ctx context.Context, id string) error {
	return dbErr("delete replica", s.retry(func() error {
		_, err := s.pool.Exec(ctx, "DELETE FROM replicas WHERE id = $1", id)
		return err
	}))
}

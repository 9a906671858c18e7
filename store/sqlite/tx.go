package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// wtx is a write transaction whose statements are prepared once per store
// (parsing SQL was a fifth of the cost of a rollout lifecycle). A statement
// first seen inside a transaction is prepared on the transaction (the only
// writer connection is busy) and cached for later ones once it ends.
type wtx struct {
	*sql.Tx
	s       *Store
	pending *[]string
}

func (t wtx) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	t.s.mu.Lock()
	st, ok := t.s.stmts[q]
	t.s.mu.Unlock()
	if ok {
		return t.Tx.StmtContext(ctx, st), nil
	}
	*t.pending = append(*t.pending, q)
	return t.Tx.PrepareContext(ctx, q)
}

// cache prepares statements first used by a finished transaction.
func (s *Store) cache(ctx context.Context, qs []string) {
	for _, q := range qs {
		s.mu.Lock()
		_, ok := s.stmts[q]
		s.mu.Unlock()
		if ok {
			continue
		}
		st, err := s.w.PrepareContext(ctx, q)
		if err != nil {
			continue // the next transaction prepares it again
		}
		s.mu.Lock()
		if _, dup := s.stmts[q]; dup {
			st.Close()
		} else {
			s.stmts[q] = st
		}
		s.mu.Unlock()
	}
}

func (t wtx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	st, err := t.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

func (t wtx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	st, err := t.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// QueryRowContext reports a prepare error through Row.Scan, like sql.Tx.
func (t wtx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	st, err := t.stmt(ctx, q)
	if err != nil {
		return t.Tx.QueryRowContext(ctx, q, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

func ts(t time.Time) int64 { return t.UnixNano() }

func fromTS(n int64) time.Time { return time.Unix(0, n).UTC() }

func now() time.Time { return time.Now().UTC() }

func (s *Store) tx(ctx context.Context, fn func(tx wtx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite store: begin: %w", err)
	}
	var pending []string
	err = fn(wtx{tx, s, &pending})
	if err != nil {
		tx.Rollback()
	} else if err = tx.Commit(); err != nil {
		err = fmt.Errorf("sqlite store: commit: %w", err)
	} else {
		s.committed()
	}
	if len(pending) > 0 {
		s.cache(ctx, pending)
	}
	return err
}

// endingTx runs a transaction that may end attempts: no event is
// journaled meanwhile, and what was journaled before is applied first
// (see journal.go).
func (s *Store) endingTx(ctx context.Context, fn func(tx wtx) error) error {
	if s.journal == nil {
		return s.tx(ctx, fn)
	}
	return s.journal.exclusive(ctx, func() error { return s.tx(ctx, fn) })
}

type scanner interface{ Scan(dest ...any) error }

type querier interface {
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

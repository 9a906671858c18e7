package sqlite

import (
	"context"
	"encoding/json"
	"fmt"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/aglrl/agl/store"
)

// RegisterModel implements store.Store.
func (s *Store) RegisterModel(ctx context.Context, m store.Model) (store.Model, error) {
	if err := m.Validate(); err != nil {
		return m, err
	}
	err := s.tx(ctx, func(tx wtx) error {
		var last int64
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM models WHERE name = ?`, m.Name).Scan(&last); err != nil {
			return fmt.Errorf("sqlite store: model version: %w", err)
		}
		if m.Version == 0 {
			v, err := store.NextModelVersion(m.Name, last)
			if err != nil {
				return err
			}
			m.Version = v
		} else if m.Version <= last {
			return store.Errorf(store.ErrConflict, "model %s version %d is not above the latest %d", m.Name, m.Version, last)
		}
		m.CreatedAt = fromTS(ts(now()))
		eps, _ := json.Marshal(m.Endpoints)
		var meta any
		if len(m.Metadata) > 0 {
			meta = []byte(m.Metadata)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO models (name, version, endpoints, weights, metadata, created_at) VALUES (?,?,?,?,?,?)`,
			m.Name, m.Version, string(eps), m.Weights, meta, ts(m.CreatedAt)); err != nil {
			return fmt.Errorf("sqlite store: insert model: %w", err)
		}
		return nil
	})
	return m, err
}

// ListModels implements store.Store.
func (s *Store) ListModels(ctx context.Context, name string) ([]store.Model, error) {
	q := `SELECT name, version, endpoints, weights, metadata, created_at FROM models`
	args := []any{}
	if name != "" {
		q += ` WHERE name = ?`
		args = append(args, name)
	}
	q += ` ORDER BY created_at DESC, name, version DESC`
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: list models: %w", err)
	}
	defer rows.Close()
	out := []store.Model{}
	for rows.Next() {
		var m store.Model
		var eps string
		var meta []byte
		var created int64
		if err := rows.Scan(&m.Name, &m.Version, &eps, &m.Weights, &meta, &created); err != nil {
			return nil, fmt.Errorf("sqlite store: scan model: %w", err)
		}
		if err := json.Unmarshal([]byte(eps), &m.Endpoints); err != nil {
			return nil, fmt.Errorf("sqlite store: model endpoints: %w", err)
		}
		if len(meta) > 0 {
			m.Metadata = meta
		}
		m.CreatedAt = fromTS(created)
		out = append(out, m)
	}
	return out, rows.Err()
}

package postgres

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aglrl/agl/store"
)

const modelCols = `name, version, endpoints, weights, metadata, created_at`

func scanModel(row pgx.Row) (store.Model, error) {
	var (
		m    store.Model
		meta []byte
		t    time.Time
	)
	if err := row.Scan(&m.Name, &m.Version, &m.Endpoints, &m.Weights, &meta, &t); err != nil {
		return store.Model{}, err
	}
	if meta != nil {
		m.Metadata = json.RawMessage(meta)
	}
	if len(m.Endpoints) == 0 {
		m.Endpoints = nil
	}
	m.CreatedAt = t.UTC()
	return m, nil
}

// RegisterModel records a model version: 0 takes the previous version + 1,
// an explicit version must exceed every earlier one of that name.
func (s *Store) RegisterModel(ctx context.Context, m store.Model) (store.Model, error) {
	if err := s.check(); err != nil {
		return store.Model{}, err
	}
	if err := m.Validate(); err != nil {
		return store.Model{}, err
	}
	var out store.Model
	err := s.tx(ctx, func(tx pgx.Tx) error {
		// One registration per name at a time.
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended('agl_model:' || $1, 0))", m.Name); err != nil {
			return err
		}
		var prev int64
		if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM models WHERE name = $1", m.Name).Scan(&prev); err != nil {
			return err
		}
		v := m.Version
		if v == 0 {
			var err error
			if v, err = store.NextModelVersion(m.Name, prev); err != nil {
				return err
			}
		} else if v <= prev {
			return store.Errorf(store.ErrConflict, "model %s: version %d does not exceed the latest version %d", m.Name, v, prev)
		}
		eps := m.Endpoints
		if eps == nil {
			eps = []string{}
		}
		var meta []byte
		if len(m.Metadata) > 0 {
			meta = []byte(m.Metadata)
		}
		var err error
		out, err = scanModel(tx.QueryRow(ctx, `INSERT INTO models (name, version, endpoints, weights, metadata, created_at)
			VALUES ($1, $2, $3, $4, $5, $6) RETURNING `+modelCols, m.Name, v, eps, m.Weights, meta, now()))
		if err != nil {
			return err
		}
		return notify(ctx, tx)
	})
	if err != nil {
		return store.Model{}, dbErr("register model", err)
	}
	return out, nil
}

// ListModels lists model versions, newest first; name "" lists all.
func (s *Store) ListModels(ctx context.Context, name string) ([]store.Model, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	q := "SELECT " + modelCols + " FROM models"
	var args []any
	if name != "" {
		q += " WHERE name = $1"
		args = append(args, name)
	}
	q += " ORDER BY seq DESC"
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, dbErr("list models", err)
	}
	defer rows.Close()
	out := []store.Model{}
	for rows.Next() {
		m, err := scanModel(rows)
		if err != nil {
			return nil, dbErr("list models", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr("list models", err)
	}
	return out, nil
}

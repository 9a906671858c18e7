package al

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/aglrl/agl/store"
)

// Model is AL's Model: one inference endpoint of a model.
type Model struct {
	Model    string `json:"model"`
	Endpoint string `json:"endpoint"`
	Version  int64  `json:"version"`
}

// modelMeta is the metadata of a model version this API registered:
// Source marks it, ALVersion is the version AL's Model carried (AL's
// trainer sends none: 0), which AL's model_request records show as
// server.version where agl's registry numbers the version itself.
type modelMeta struct {
	Source    string `json:"source"`
	ALVersion int64  `json:"al_version"`
}

const modelSource = "agent-lightning"

func modelMetadata(alVersion int64) json.RawMessage {
	b, _ := json.Marshal(modelMeta{Source: modelSource, ALVersion: alVersion})
	return b
}

// alVersions maps each model version this API registered to the version
// AL gave it: name → agl version → AL version.
func (h *Handler) alVersions(ctx context.Context) (map[string]map[int64]int64, error) {
	ms, err := h.opt.Store.ListModels(ctx, "")
	if err != nil {
		return nil, err
	}
	out := map[string]map[int64]int64{}
	for _, m := range ms {
		var meta modelMeta
		if json.Unmarshal(m.Metadata, &meta) != nil || meta.Source != modelSource {
			continue
		}
		if out[m.Name] == nil {
			out[m.Name] = map[int64]int64{}
		}
		out[m.Name][m.Version] = meta.ALVersion
	}
	return out, nil
}

// registerModels upserts AL's (model, endpoint) pairs into agl's model
// registry: per model, a new version whose endpoints are the latest
// version's plus the new ones (the version AL sent when it exceeds the
// latest, else the next one); nothing is registered when nothing changed.
func (h *Handler) registerModels(w http.ResponseWriter, r *http.Request) error {
	var body []*struct {
		Model    *string `json:"model"`
		Endpoint *string `json:"endpoint"`
		Version  *int64  `json:"version"`
	}
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	out := make([]Model, 0, len(body))
	var names []string
	for i, m := range body {
		switch {
		case m == nil:
			return validation([]any{"body", i}, "Input should be a valid dictionary or object to extract fields from")
		case m.Model == nil:
			return validation([]any{"body", i, "model"}, "Field required")
		case m.Endpoint == nil:
			return validation([]any{"body", i, "endpoint"}, "Field required")
		}
		am := Model{Model: *m.Model, Endpoint: *m.Endpoint}
		if m.Version != nil {
			am.Version = *m.Version
		}
		out = append(out, am)
		if !slices.Contains(names, am.Model) {
			names = append(names, am.Model)
		}
	}
	ctx := r.Context()
	for _, name := range names {
		latest, err := h.latest(r, name)
		if err != nil {
			return err
		}
		eps := slices.Clone(latest.Endpoints)
		var version int64
		for _, m := range out {
			if m.Model != name {
				continue
			}
			if !slices.Contains(eps, m.Endpoint) {
				eps = append(eps, m.Endpoint)
			}
			version = max(version, m.Version)
		}
		slices.Sort(eps)
		if latest.Name != "" && slices.Equal(eps, sorted(latest.Endpoints)) && version <= latest.Version {
			continue
		}
		alVersion := version
		if version <= latest.Version {
			version = 0 // the store assigns latest+1
		}
		if _, err := h.opt.Store.RegisterModel(ctx, store.Model{Name: name, Version: version, Endpoints: eps, Metadata: modelMetadata(alVersion)}); err != nil {
			return err
		}
	}
	h.forgetServers()
	if h.opt.ModelsChanged != nil {
		h.opt.ModelsChanged(r.Context())
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// latest returns a model's newest version (zero when it has none).
func (h *Handler) latest(r *http.Request, name string) (store.Model, error) {
	ms, err := h.opt.Store.ListModels(r.Context(), name)
	if err != nil || len(ms) == 0 {
		return store.Model{}, err
	}
	return slices.MaxFunc(ms, func(a, b store.Model) int { return int(a.Version - b.Version) }), nil
}

// deleteModels is AL's DELETE /api/models: agl's registry keeps every
// version, so each model with endpoints gets a new version without any.
func (h *Handler) deleteModels(w http.ResponseWriter, r *http.Request) error {
	ms, err := h.opt.Store.ListModels(r.Context(), "")
	if err != nil {
		return err
	}
	newest := map[string]store.Model{}
	for _, m := range ms {
		if cur, ok := newest[m.Name]; !ok || m.Version > cur.Version {
			newest[m.Name] = m
		}
	}
	for _, m := range newest {
		if len(m.Endpoints) == 0 {
			continue
		}
		if _, err := h.opt.Store.RegisterModel(r.Context(), store.Model{Name: m.Name, Weights: m.Weights, Metadata: modelMetadata(0)}); err != nil {
			return err
		}
	}
	h.forgetServers()
	if h.opt.ModelsChanged != nil {
		h.opt.ModelsChanged(r.Context())
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// hasServers reports whether the newest version of ModelName has an
// endpoint (cached for authTTL: registrations through another gateway
// replica are seen within it).
func (h *Handler) hasServers(r *http.Request) (bool, error) {
	h.serversMu.Lock()
	c := h.servers
	h.serversMu.Unlock()
	if time.Now().Before(c.until) {
		return c.ok, nil
	}
	m, err := h.latest(r, h.cfg.ModelName)
	if err != nil {
		return false, err
	}
	ok := h.cfg.ModelName != "" && len(m.Endpoints) > 0
	h.serversMu.Lock()
	h.servers.ok, h.servers.until = ok, time.Now().Add(authTTL)
	h.serversMu.Unlock()
	return ok, nil
}

func (h *Handler) forgetServers() {
	h.serversMu.Lock()
	h.servers.until = time.Time{}
	h.serversMu.Unlock()
}

package al

import (
	"net/http"
	"strings"
)

// operations are AL's routes as its FastAPI app names them (summary: the
// endpoint function's name, title-cased, as FastAPI derives it; tags: its
// router's), for /openapi.json. AL v1.0.0 agentlightning/server/app.py and
// routes/*.py.
var operations = []struct{ method, path, summary, tag string }{
	{"get", "/healthz", "Healthz", ""},
	{"post", "/api/rollouts", "Enqueue Rollouts", "rollouts"},
	{"get", "/api/rollouts", "List Rollouts", "rollouts"},
	{"get", "/api/rollouts/terminal", "List Terminal Rollouts", "rollouts"},
	{"get", "/api/rollouts/{rollout_id}", "Get Rollout", "rollouts"},
	{"patch", "/api/rollouts/{rollout_id}", "Patch Rollout", "rollouts"},
	{"delete", "/api/rollouts/{rollout_id}", "Delete Rollout", "rollouts"},
	{"post", "/api/rollouts/{rollout_id}/attempt/{attempt_id}/events", "Post Event", "events"},
	{"get", "/api/rollouts/{rollout_id}/events", "Query Events", "events"},
	{"post", "/api/models", "Register Models", "models"},
	{"delete", "/api/models", "Delete All Models", "models"},
	{"post", "/proxy/rollout/{rollout_id}/attempt/{attempt_id}/mode/{mode}/openai/v1/{upstream_path}", "Llm Proxy", "gateway"},
	{"post", "/proxy/pause", "Pause Proxy", "gateway-management"},
	{"post", "/proxy/resume", "Resume Proxy", "gateway-management"},
	{"get", "/proxy/state", "Proxy State", "gateway-management"},
}

// openAPI answers /openapi.json with AL's info (FastAPI(title="Agent
// Lightning", version="1.0.0"), app.py line 75) and its operations; like
// FastAPI's, it needs no key.
func (h *Handler) openAPI(w http.ResponseWriter, r *http.Request) error {
	paths := map[string]map[string]any{}
	for _, op := range operations {
		if paths[op.path] == nil {
			paths[op.path] = map[string]any{}
		}
		o := map[string]any{"summary": op.summary, "operationId": strings.ReplaceAll(strings.ToLower(op.summary), " ", "_") + "_" + op.method}
		if op.tag != "" {
			o["tags"] = []string{op.tag}
		}
		paths[op.path][op.method] = o
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"openapi": "3.1.0",
		"info":    map[string]string{"title": "Agent Lightning", "version": "1.0.0"},
		"paths":   paths,
	})
	return nil
}

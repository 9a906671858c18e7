package api

import "github.com/aglrl/agl/store"

// ErrorBody is every /api error: {"error": {"code": …, "message": …}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail names what went wrong.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// CreateRolloutsRequest is the body of POST /api/rollouts.
type CreateRolloutsRequest struct {
	Rollouts []store.NewRollout `json:"rollouts"`
}

// RolloutsResponse answers POST /api/rollouts, GET /api/rollouts and
// GET /api/terminal. NextCursor continues the listing; 0 means no more (for
// /api/terminal it is the cursor to pass next time, always set).
type RolloutsResponse struct {
	Rollouts   []store.Rollout `json:"rollouts"`
	NextCursor int64           `json:"next_cursor,omitempty"`
}

// CancelRequest is the optional body of POST /api/rollouts/{id}/cancel.
type CancelRequest struct {
	Reason string `json:"reason,omitempty"`
}

// ClaimRequest is the body of POST /api/claim.
type ClaimRequest = store.ClaimRequest

// CompleteRequest is the body of POST /api/rollouts/{id}/attempts/{aid}/complete.
type CompleteRequest struct {
	Status store.AttemptStatus `json:"status"`
	Error  string              `json:"error,omitempty"`
}

// AppendEventsRequest is the body of POST …/attempts/{aid}/events.
type AppendEventsRequest struct {
	Events []store.NewEvent `json:"events"`
}

// EventsResponse lists events.
type EventsResponse struct {
	Events []store.Event `json:"events"`
}

// ModelsResponse lists model versions.
type ModelsResponse struct {
	Models []store.Model `json:"models"`
}

// GatewayStatus answers GET /api/gateway.
type GatewayStatus struct {
	Version  string       `json:"version"`
	Paused   bool         `json:"paused"`
	InFlight int          `json:"in_flight"`
	LLM      bool         `json:"llm"`
	Counts   store.Counts `json:"rollouts"`
	// Replica names the answering gateway and Replicas lists the live
	// replicas' reports, when several share a PostgreSQL store.
	Replica  string          `json:"replica,omitempty"`
	Replicas []store.Replica `json:"replicas,omitempty"`
}

// TrainStepsResponse answers GET /api/train/steps.
type TrainStepsResponse struct {
	Steps []store.TrainStep `json:"steps"`
}

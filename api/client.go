package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aglrl/agl/store"
)

// Client calls a gateway's /api routes.
type Client struct {
	// BaseURL is the gateway root, e.g. http://127.0.0.1:8080.
	BaseURL string
	// Key is the admin key, or an attempt's scoped key.
	Key  string
	HTTP *http.Client
}

// NewClient returns a client for the gateway at baseURL.
func NewClient(baseURL, key string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Key: key, HTTP: &http.Client{Timeout: 90 * time.Second}}
}

// Error is an error answered by the gateway: what Client returns for a
// non-2xx answer, and what handlers return for WriteError to answer with.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("gateway: %d %s: %s", e.Status, e.Code, e.Message)
}

// do sends a JSON request and decodes a JSON answer into out (if not nil).
// It returns (false, nil) on 204 No Content.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, in, out any) (bool, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return false, fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	u := c.BaseURL + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return false, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Key != "" {
		req.Header.Set("Authorization", "Bearer "+c.Key)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNoContent {
		return false, nil
	}
	if resp.StatusCode >= 300 {
		var eb ErrorBody
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if json.Unmarshal(b, &eb) != nil || eb.Error.Message == "" {
			eb.Error = ErrorDetail{Code: http.StatusText(resp.StatusCode), Message: strings.TrimSpace(string(b))}
		}
		return false, &Error{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message}
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return false, fmt.Errorf("decode %s %s: %w", method, path, err)
		}
	}
	return true, nil
}

func esc(s string) string { return url.PathEscape(s) }

// CreateRollouts creates rollouts (idempotent on ids).
func (c *Client) CreateRollouts(ctx context.Context, rs []store.NewRollout) ([]store.Rollout, error) {
	var out RolloutsResponse
	_, err := c.do(ctx, http.MethodPost, "/api/rollouts", nil, CreateRolloutsRequest{Rollouts: rs}, &out)
	return out.Rollouts, err
}

// ListRollouts lists one page of rollouts.
func (c *Client) ListRollouts(ctx context.Context, f store.RolloutFilter) (RolloutsResponse, error) {
	q := url.Values{}
	for _, s := range f.Status {
		q.Add("status", string(s))
	}
	if f.GroupID != "" {
		q.Set("group", f.GroupID)
	}
	if f.Mode != "" {
		q.Set("mode", string(f.Mode))
	}
	if f.Step != nil {
		q.Set("step", strconv.FormatInt(*f.Step, 10))
	}
	if f.Cursor > 0 {
		q.Set("cursor", strconv.FormatInt(f.Cursor, 10))
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	if f.Desc {
		q.Set("order", "desc")
	}
	if f.MinReward != nil {
		q.Set("min_reward", strconv.FormatFloat(*f.MinReward, 'g', -1, 64))
	}
	if f.MaxReward != nil {
		q.Set("max_reward", strconv.FormatFloat(*f.MaxReward, 'g', -1, 64))
	}
	var out RolloutsResponse
	_, err := c.do(ctx, http.MethodGet, "/api/rollouts", q, nil, &out)
	return out, err
}

// GetRollout returns one rollout with its attempts.
func (c *Client) GetRollout(ctx context.Context, id string) (store.Rollout, error) {
	var out store.Rollout
	_, err := c.do(ctx, http.MethodGet, "/api/rollouts/"+esc(id), nil, nil, &out)
	return out, err
}

// CancelRollout cancels a rollout.
func (c *Client) CancelRollout(ctx context.Context, id, reason string) (store.Rollout, error) {
	var out store.Rollout
	_, err := c.do(ctx, http.MethodPost, "/api/rollouts/"+esc(id)+"/cancel", nil, CancelRequest{Reason: reason}, &out)
	return out, err
}

// Claim takes the next queued rollout; ok is false when none is queued.
func (c *Client) Claim(ctx context.Context, req store.ClaimRequest) (cl store.Claim, ok bool, err error) {
	ok, err = c.do(ctx, http.MethodPost, "/api/claim", nil, req, &cl)
	return cl, ok, err
}

func attemptPath(rid, aid, what string) string {
	return "/api/rollouts/" + esc(rid) + "/attempts/" + esc(aid) + "/" + what
}

// Heartbeat reports that an attempt is alive.
func (c *Client) Heartbeat(ctx context.Context, rid, aid string) (store.Attempt, error) {
	var out store.Attempt
	_, err := c.do(ctx, http.MethodPost, attemptPath(rid, aid, "heartbeat"), nil, struct{}{}, &out)
	return out, err
}

// RevokeKey makes the attempt's scoped key grant nothing from now on.
func (c *Client) RevokeKey(ctx context.Context, rid, aid string) error {
	_, err := c.do(ctx, http.MethodPost, attemptPath(rid, aid, "revoke"), nil, struct{}{}, nil)
	return err
}

// Complete ends an attempt as succeeded or failed.
func (c *Client) Complete(ctx context.Context, rid, aid string, st store.AttemptStatus, errMsg string) (store.Rollout, error) {
	var out store.Rollout
	_, err := c.do(ctx, http.MethodPost, attemptPath(rid, aid, "complete"), nil, CompleteRequest{Status: st, Error: errMsg}, &out)
	return out, err
}

// AppendEvents appends events to a running attempt.
func (c *Client) AppendEvents(ctx context.Context, rid, aid string, evs []store.NewEvent) ([]store.Event, error) {
	var out EventsResponse
	_, err := c.do(ctx, http.MethodPost, attemptPath(rid, aid, "events"), nil, AppendEventsRequest{Events: evs}, &out)
	return out.Events, err
}

// ListEvents lists a rollout's events (types may be empty for all).
func (c *Client) ListEvents(ctx context.Context, f store.EventFilter) ([]store.Event, error) {
	q := url.Values{}
	if f.AttemptID != "" {
		q.Set("attempt", f.AttemptID)
	}
	for _, t := range f.Types {
		q.Add("type", t)
	}
	if f.AfterSeq > 0 {
		q.Set("after", strconv.FormatInt(f.AfterSeq, 10))
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	var out EventsResponse
	_, err := c.do(ctx, http.MethodGet, "/api/rollouts/"+esc(f.RolloutID)+"/events", q, nil, &out)
	return out.Events, err
}

// Terminal returns rollouts that became terminal after the cursor, waiting
// up to wait for one; it returns the cursor to use next.
func (c *Client) Terminal(ctx context.Context, after int64, limit int, wait time.Duration) ([]store.Rollout, int64, error) {
	q := url.Values{"after": {strconv.FormatInt(after, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	var out RolloutsResponse
	_, err := c.do(ctx, http.MethodGet, "/api/terminal", q, nil, &out)
	if err != nil {
		return nil, after, err
	}
	return out.Rollouts, out.NextCursor, nil
}

// Source reads a gateway's store through its API the way a store does
// (samples.Source): Terminal without a wait, GetRollout and ListEvents as
// the Client has them. It needs the admin key.
type Source struct{ *Client }

// Terminal returns at most limit rollouts that became terminal after the
// cursor, without waiting for more.
func (s Source) Terminal(ctx context.Context, after int64, limit int) ([]store.Rollout, error) {
	rs, _, err := s.Client.Terminal(ctx, after, limit, 0)
	return rs, err
}

// RegisterModel registers a model version.
func (c *Client) RegisterModel(ctx context.Context, m store.Model) (store.Model, error) {
	var out store.Model
	_, err := c.do(ctx, http.MethodPost, "/api/models", nil, m, &out)
	return out, err
}

// ListModels lists model versions ("" for all names).
func (c *Client) ListModels(ctx context.Context, name string) ([]store.Model, error) {
	var q url.Values
	if name != "" {
		q = url.Values{"name": {name}}
	}
	var out ModelsResponse
	_, err := c.do(ctx, http.MethodGet, "/api/models", q, nil, &out)
	return out.Models, err
}

// Gateway returns the gateway's state.
func (c *Client) Gateway(ctx context.Context) (GatewayStatus, error) {
	var out GatewayStatus
	_, err := c.do(ctx, http.MethodGet, "/api/gateway", nil, nil, &out)
	return out, err
}

// SetPaused pauses (true) or resumes (false) the gateway's LLM routes.
func (c *Client) SetPaused(ctx context.Context, paused bool) (GatewayStatus, error) {
	path := "/api/gateway/resume"
	if paused {
		path = "/api/gateway/pause"
	}
	var out GatewayStatus
	_, err := c.do(ctx, http.MethodPost, path, nil, struct{}{}, &out)
	return out, err
}

// Drain waits until no LLM call is in flight.
func (c *Client) Drain(ctx context.Context, timeout time.Duration) (GatewayStatus, error) {
	var out GatewayStatus
	_, err := c.do(ctx, http.MethodPost, "/api/gateway/drain", url.Values{"timeout": {timeout.String()}}, struct{}{}, &out)
	return out, err
}

// PutTrainStep records a trainer step's metrics (replacing an earlier report
// of the same run, mode and step).
func (c *Client) PutTrainStep(ctx context.Context, t store.TrainStep) error {
	_, err := c.do(ctx, http.MethodPost, "/api/train/steps", nil, t, nil)
	return err
}

// ListTrainSteps lists recorded trainer steps; run "" lists every run.
func (c *Client) ListTrainSteps(ctx context.Context, run string) ([]store.TrainStep, error) {
	q := url.Values{}
	if run != "" {
		q.Set("run", run)
	}
	var out TrainStepsResponse
	_, err := c.do(ctx, http.MethodGet, "/api/train/steps", q, nil, &out)
	return out.Steps, err
}

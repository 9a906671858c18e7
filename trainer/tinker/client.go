// Package tinker drives a Tinker-compatible training service (Thinking
// Machines' hosted Tinker, SkyRL's Tinker server, verl-Tinker) as an agl
// policy: agl's samples become forward_backward datums, optim_step takes
// the update, save_weights_for_sampler publishes it and `sample`
// generates from the gateway's token ids. The wire follows the official
// Python SDK, version SDKVersion: JSON bodies, except the protobuf
// forward_backward request and the protobuf forward_backward and sample
// results of retrieve_future.
package tinker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// SDKVersion is the version of the official SDK whose wire agl follows.
const SDKVersion = "0.25.0"

// Content types the SDK sends and accepts.
const (
	ctJSON  = "application/json"
	ctProto = "application/x-protobuf"
)

// Client is a connection to one Tinker service with one API key.
type Client struct {
	base string
	key  string
	hc   *http.Client
	// RetryBase and RetryMax bound the backoff between retries (the SDK's
	// 0.5 s and 10 s); MaxRetries bounds the retries of one call (10).
	RetryBase, RetryMax time.Duration
	MaxRetries          int
	// MaxResponseBytes refuses a larger answer (default 256 MiB).
	MaxResponseBytes int64
	// HeartbeatPeriod is the session heartbeat cadence (the SDK's 10 s).
	HeartbeatPeriod time.Duration

	sent, received atomic.Int64
}

// NewClient returns a client of the service at baseURL authenticating
// with key (sent as X-API-Key, never logged).
func NewClient(baseURL, key string) (*Client, error) {
	if baseURL == "" {
		return nil, errors.New("tinker: no base_url (set it or TINKER_BASE_URL)")
	}
	if key == "" {
		return nil, errors.New("tinker: no API key")
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), key: key, hc: &http.Client{},
		RetryBase: 500 * time.Millisecond, RetryMax: 10 * time.Second, MaxRetries: 10,
		MaxResponseBytes: 256 << 20, HeartbeatPeriod: 10 * time.Second}, nil
}

// WireBytes reports the request and response body bytes this client has
// sent and received.
func (c *Client) WireBytes() (sent, received int64) { return c.sent.Load(), c.received.Load() }

// APIError is a service's refusal of one call: an HTTP status other than
// 2xx, or a future that failed.
type APIError struct {
	Endpoint string
	Status   int // 0 for a failed future
	Message  string
}

func (e *APIError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("tinker %s: request failed: %s", e.Endpoint, e.Message)
	}
	hint := ""
	if e.Status == http.StatusUnauthorized {
		hint = " (check the API key)"
	}
	return fmt.Sprintf("tinker %s: HTTP %d%s: %s", e.Endpoint, e.Status, hint, e.Message)
}

// retryKind says which failures of a call are retried.
type retryKind int

const (
	// readOnly calls (retrieve_future, session_heartbeat) are retried on
	// 408, 409, 429, 5xx and transport errors, like the SDK.
	readOnly retryKind = iota
	// enqueue calls start work: retried only when the service refused to
	// take them (429) or the connection never opened, so that work is
	// never done twice.
	enqueue
)

type response struct {
	ctype string
	body  []byte
}

// oneLine shortens a server message to one line of at most 300 bytes.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// serverMessage extracts the message of an error body.
func serverMessage(b []byte) string {
	var m struct {
		Detail  any    `json:"detail"`
		Error   any    `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &m) == nil {
		for _, v := range []any{m.Detail, m.Error, m.Message} {
			switch x := v.(type) {
			case string:
				if x != "" {
					return oneLine(x)
				}
			case nil:
			default:
				if j, err := json.Marshal(x); err == nil {
					return oneLine(string(j))
				}
			}
		}
	}
	if len(b) == 0 {
		return "(empty body)"
	}
	return oneLine(string(b))
}

func idempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "agl-retry-" + hex.EncodeToString(b[:])
}

// backoff is the wait before retry n (0-based): Retry-After when it is
// in (0, 60] s, else RetryBase·2^n capped at RetryMax.
func (c *Client) backoff(n int, h http.Header) time.Duration {
	if s, err := strconv.ParseFloat(h.Get("Retry-After"), 64); err == nil && s > 0 && s <= 60 {
		return time.Duration(s * float64(time.Second))
	}
	d := time.Duration(float64(c.RetryBase) * math.Pow(2, float64(n)))
	return min(d, c.RetryMax)
}

// call posts body to endpoint and returns the 2xx answer, retrying per
// kind with the same X-Idempotency-Key.
func (c *Client) call(ctx context.Context, endpoint, ctype string, body []byte, accept string, kind retryKind) (response, error) {
	key := idempotencyKey()
	for n := 0; ; n++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+endpoint, bytes.NewReader(body))
		if err != nil {
			return response{}, fmt.Errorf("tinker %s: %w", endpoint, err)
		}
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("Accept", accept)
		req.Header.Set("User-Agent", "agl (tinker-sdk-wire/"+SDKVersion+")")
		req.Header.Set("X-API-Key", c.key)
		req.Header.Set("X-Idempotency-Key", key)
		req.Header.Set("X-Stainless-Retry-Count", strconv.Itoa(n))
		c.sent.Add(int64(len(body)))
		resp, err := c.hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return response{}, fmt.Errorf("tinker %s: %w", endpoint, ctx.Err())
			}
			var op *net.OpError
			retry := kind == readOnly || (errors.As(err, &op) && op.Op == "dial")
			if !retry || n >= c.MaxRetries {
				return response{}, fmt.Errorf("tinker %s: %w", endpoint, err)
			}
			if err := sleep(ctx, c.backoff(n, nil)); err != nil {
				return response{}, fmt.Errorf("tinker %s: %w", endpoint, err)
			}
			continue
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, c.MaxResponseBytes+1))
		resp.Body.Close()
		c.received.Add(int64(len(b)))
		if err == nil && int64(len(b)) > c.MaxResponseBytes {
			err = fmt.Errorf("answer exceeds %d bytes", c.MaxResponseBytes)
		}
		if err != nil {
			return response{}, fmt.Errorf("tinker %s: reading the answer: %w", endpoint, err)
		}
		st := resp.StatusCode
		if st/100 == 2 {
			return response{ctype: resp.Header.Get("Content-Type"), body: b}, nil
		}
		retry := st == http.StatusTooManyRequests ||
			(kind == readOnly && (st == http.StatusRequestTimeout || st == http.StatusConflict || st >= 500))
		if !retry || n >= c.MaxRetries {
			// A server that echoes the key does not get it into an error.
			msg := strings.ReplaceAll(serverMessage(b), c.key, "[key]")
			return response{}, &APIError{Endpoint: endpoint, Status: st, Message: msg}
		}
		if err := sleep(ctx, c.backoff(n, resp.Header)); err != nil {
			return response{}, fmt.Errorf("tinker %s: %w", endpoint, err)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// postJSON posts v as JSON and decodes the JSON answer into out.
func (c *Client) postJSON(ctx context.Context, endpoint string, v, out any, kind retryKind) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("tinker %s: %w", endpoint, err)
	}
	r, err := c.call(ctx, endpoint, ctJSON, b, ctJSON, kind)
	if err != nil {
		return err
	}
	return decodeJSON(endpoint, r.body, out)
}

func decodeJSON(endpoint string, b []byte, out any) error {
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("tinker %s: malformed answer: %w", endpoint, err)
	}
	return nil
}

// future is the UntypedAPIFuture an enqueue call answers.
type future struct {
	RequestID string `json:"request_id"`
	ModelID   string `json:"model_id,omitempty"`
}

// submit posts an enqueue call and returns its future's request id.
func (c *Client) submit(ctx context.Context, endpoint, ctype string, body []byte) (string, error) {
	r, err := c.call(ctx, endpoint, ctype, body, ctJSON, enqueue)
	if err != nil {
		return "", err
	}
	var f future
	if err := decodeJSON(endpoint, r.body, &f); err != nil {
		return "", err
	}
	if f.RequestID == "" {
		return "", fmt.Errorf("tinker %s: malformed answer: no request_id", endpoint)
	}
	return f.RequestID, nil
}

func (c *Client) submitJSON(ctx context.Context, endpoint string, v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("tinker %s: %w", endpoint, err)
	}
	return c.submit(ctx, endpoint, ctJSON, b)
}

// maxBadRequestRetries is the SDK's budget for bare 400s on
// retrieve_future (which an upstream proxy may inject).
const maxBadRequestRetries = 3

// retrieve polls retrieve_future for request id until it completes;
// endpoint names the call that created the future (for errors). proto
// asks for a protobuf result (forward_backward, sample); the answer is
// its body, protobuf or JSON as the service sent it.
func (c *Client) retrieve(ctx context.Context, endpoint, id string, proto bool) (response, error) {
	accept := ctJSON
	if proto {
		accept = ctProto
	}
	body, _ := json.Marshal(map[string]any{"request_id": id, "allow_metadata_only": false})
	bad := 0
	for {
		r, err := c.call(ctx, "/api/v1/retrieve_future", ctJSON, body, accept, readOnly)
		var ae *APIError
		if errors.As(err, &ae) && ae.Status == http.StatusBadRequest && bad < maxBadRequestRetries {
			bad++
			continue
		}
		if err != nil {
			if errors.As(err, &ae) && ae.Status == http.StatusGone {
				return response{}, fmt.Errorf("tinker %s: the service dropped request %s (HTTP 410: %s)", endpoint, id, ae.Message)
			}
			return response{}, fmt.Errorf("%s: %w", endpoint, err)
		}
		if strings.HasPrefix(r.ctype, ctProto) {
			if !proto {
				return response{}, fmt.Errorf("tinker %s: protobuf answer where JSON was asked for", endpoint)
			}
			return r, nil
		}
		var m struct {
			Type     string  `json:"type"`
			Error    *string `json:"error"`
			Category string  `json:"category"`
		}
		if err := decodeJSON(endpoint, r.body, &m); err != nil {
			return response{}, err
		}
		switch {
		case m.Type == "try_again":
			continue
		case m.Error != nil:
			msg := oneLine(*m.Error)
			if m.Category != "" {
				msg += " (" + m.Category + " error)"
			}
			return response{}, &APIError{Endpoint: endpoint, Message: msg}
		case proto:
			return response{}, fmt.Errorf("tinker %s: JSON answer where protobuf was asked for", endpoint)
		}
		return r, nil
	}
}

// result submits a JSON enqueue call, waits for its future and decodes
// the JSON result into out.
func (c *Client) result(ctx context.Context, endpoint string, req, out any) error {
	id, err := c.submitJSON(ctx, endpoint, req)
	if err != nil {
		return err
	}
	r, err := c.retrieve(ctx, endpoint, id, false)
	if err != nil {
		return err
	}
	return decodeJSON(endpoint, r.body, out)
}

// Session is one Tinker session kept alive by heartbeats every
// Client.HeartbeatPeriod. A heartbeat the service refuses
// (other than 408/429/5xx, which are retried) marks the session lost:
// every later call fails with that reason.
type Session struct {
	c  *Client
	ID string

	mu   sync.Mutex
	lost error
	stop context.CancelFunc
	done chan struct{}
}

// NewSession creates a session and starts its heartbeats.
func (c *Client) NewSession(ctx context.Context, tags []string) (*Session, error) {
	if tags == nil {
		tags = []string{}
	}
	var r struct {
		SessionID    string  `json:"session_id"`
		ErrorMessage *string `json:"error_message"`
	}
	err := c.postJSON(ctx, "/api/v1/create_session", map[string]any{
		"tags": tags, "user_metadata": nil, "sdk_version": SDKVersion, "type": "create_session",
	}, &r, enqueue)
	if err != nil {
		return nil, err
	}
	if r.ErrorMessage != nil && *r.ErrorMessage != "" {
		return nil, &APIError{Endpoint: "/api/v1/create_session", Status: http.StatusOK, Message: oneLine(*r.ErrorMessage)}
	}
	if r.SessionID == "" {
		return nil, errors.New("tinker /api/v1/create_session: malformed answer: no session_id")
	}
	hctx, cancel := context.WithCancel(context.Background())
	s := &Session{c: c, ID: r.SessionID, stop: cancel, done: make(chan struct{})}
	go s.heartbeat(hctx)
	return s, nil
}

func (s *Session) heartbeat(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.c.HeartbeatPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := s.c.postJSON(ctx, "/api/v1/session_heartbeat",
			map[string]any{"session_id": s.ID, "type": "session_heartbeat"}, nil, readOnly)
		var ae *APIError
		if errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500 {
			s.mu.Lock()
			s.lost = fmt.Errorf("tinker session %s is lost: %w", s.ID, err)
			s.mu.Unlock()
			return
		}
	}
}

// Err is the reason the session was lost, nil while it is alive.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost
}

// Close stops the heartbeats.
func (s *Session) Close() {
	s.stop()
	<-s.done
}

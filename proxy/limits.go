package proxy

import (
	"fmt"
	"net/http"
	"sync"
)

// AttemptLimits caps what one rollout attempt may ask of the model (the
// `proxy.attempt_limits` section): a harness that loops is stopped at the
// gateway whatever its own max-turns logic says. Zero fields are no limit.
//
//	proxy:
//	  attempt_limits: {max_calls: 12, max_response_tokens: 2048}
//
// MaxCalls counts the attempt's model calls (all agents, all API shapes);
// MaxResponseTokens the tokens the engine generated for it. A call past a
// cap is refused before the engine runs, with a 400 in the route's error
// shape (OpenAI code or Anthropic type invalid_request_error, code
// attempt_call_limit / attempt_token_limit), which SDKs do not retry; the
// attempt's earlier calls are kept. The count is per gateway process: with
// several gateway replicas behind a load balancer each enforces its own.
type AttemptLimits struct {
	MaxCalls          int `json:"max_calls,omitempty" yaml:"max_calls,omitempty"`
	MaxResponseTokens int `json:"max_response_tokens,omitempty" yaml:"max_response_tokens,omitempty"`
}

// usage counts the calls admitted and tokens generated per attempt.
type usage struct {
	mu     sync.Mutex
	m      map[Target]*attemptUsage
	stored map[Target]int64 // bytes recorded per attempt
}

type attemptUsage struct{ calls, tokens int }

// admit counts one more call of t's attempt, or refuses it when a cap is
// already reached.
func (u *usage) admit(l AttemptLimits, t Target) *apiError {
	if l.MaxCalls <= 0 && l.MaxResponseTokens <= 0 {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[Target]*attemptUsage{}
	}
	a := u.m[t.attempt()]
	if a == nil {
		if len(u.m) >= 1<<16 {
			clear(u.m)
		}
		a = &attemptUsage{}
		u.m[t.attempt()] = a
	}
	if l.MaxCalls > 0 && a.calls >= l.MaxCalls {
		return &apiError{Status: http.StatusBadRequest, Code: "attempt_call_limit",
			Message: fmt.Sprintf("this rollout attempt has made its %d model calls (proxy.attempt_limits.max_calls): no more calls", l.MaxCalls)}
	}
	if l.MaxResponseTokens > 0 && a.tokens >= l.MaxResponseTokens {
		return &apiError{Status: http.StatusBadRequest, Code: "attempt_token_limit",
			Message: fmt.Sprintf("this rollout attempt has generated %d tokens, its cap is %d (proxy.attempt_limits.max_response_tokens): no more calls", a.tokens, l.MaxResponseTokens)}
	}
	a.calls++
	return nil
}

// generated adds a call's response tokens to t's attempt.
func (u *usage) generated(l AttemptLimits, t Target, n int) {
	if l.MaxResponseTokens <= 0 {
		return
	}
	u.mu.Lock()
	if a := u.m[t.attempt()]; a != nil {
		a.tokens += n
	}
	u.mu.Unlock()
}

// forget drops an ended attempt's counts.
func (u *usage) forget(t Target) {
	u.mu.Lock()
	delete(u.m, t.attempt())
	delete(u.stored, t.attempt())
	u.mu.Unlock()
}

// counted reports whether t's attempt has a count of stored bytes here.
func (u *usage) counted(t Target) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	_, ok := u.stored[t.attempt()]
	return ok
}

// seed starts the count of t's attempt's stored bytes at n (what the
// store holds), unless it has one.
func (u *usage) seed(t Target, n int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.stored == nil {
		u.stored = map[Target]int64{}
	}
	if _, ok := u.stored[t.attempt()]; !ok {
		if len(u.stored) >= 1<<16 {
			clear(u.stored)
		}
		u.stored[t.attempt()] = n
	}
}

// store counts n more stored bytes of t's attempt, or refuses the call
// with a 413 when it would pass Config.StoredCallBytes or
// StoredAttemptBytes.
func (u *usage) store(c Config, t Target, n int64) *apiError {
	if c.StoredCallBytes > 0 && n > c.StoredCallBytes {
		return &apiError{Status: http.StatusRequestEntityTooLarge, Code: "call_too_large",
			Message: fmt.Sprintf("this call would store %d bytes, more than the %d a call may (gateway.max_stored_call_bytes): not recorded; send less (unknown request fields are stored verbatim)", n, c.StoredCallBytes)}
	}
	if c.StoredAttemptBytes <= 0 {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.stored == nil {
		u.stored = map[Target]int64{}
	}
	k := t.attempt()
	if had := u.stored[k]; had+n > c.StoredAttemptBytes {
		return &apiError{Status: http.StatusRequestEntityTooLarge, Code: "attempt_too_large",
			Message: fmt.Sprintf("this call would store %d bytes, and this rollout attempt has stored %d of the %d it may (gateway.max_stored_attempt_bytes): not recorded", n, had, c.StoredAttemptBytes)}
	}
	if len(u.stored) >= 1<<16 {
		clear(u.stored)
	}
	u.stored[k] += n
	return nil
}

package proxy

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"time"

	"github.com/aglrl/agl/store"
)

// authorize checks the scoped key; with running, the attempt must be
// running. It returns the rollout's mode.
func (p *Proxy) authorize(ctx context.Context, r *http.Request, t Target, running bool) (store.Mode, *apiError) {
	if ctx.Value(trustedKey{}) != nil {
		return p.trustedAttempt(ctx, t, running)
	}
	key, err := requestKey(r)
	if err != nil {
		return "", &apiError{Status: http.StatusUnauthorized, Message: err.Error(), Code: "invalid_api_key"}
	}
	if key == "" {
		return "", &apiError{Status: http.StatusUnauthorized, Message: "missing API key: send the attempt's scoped key as Authorization: Bearer KEY, x-api-key or x-goog-api-key", Code: "invalid_api_key"}
	}
	sum := sha256.Sum256([]byte(key))
	if p.cfg.AuthCacheTTL > 0 {
		p.authMu.RLock()
		a, ok := p.auth[t.attempt()]
		p.authMu.RUnlock()
		if ok && !a.revoked && subtle.ConstantTimeCompare(a.sum[:], sum[:]) == 1 && time.Now().Before(a.until) {
			return a.mode, nil
		}
	}
	att, err := p.st.AttemptByKey(ctx, t.RolloutID, t.AttemptID, key)
	if err != nil {
		if errors.Is(err, store.ErrForbidden) || errors.Is(err, store.ErrNotFound) {
			return "", &apiError{Status: http.StatusUnauthorized, Message: "invalid API key for this rollout attempt", Code: "invalid_api_key"}
		}
		return "", &apiError{Status: http.StatusInternalServerError, Message: "authorize: " + err.Error()}
	}
	if running && att.Status != store.AttemptRunning {
		return "", &apiError{Status: http.StatusConflict, Message: "attempt " + t.AttemptID + " is " + string(att.Status) + ", not running", Code: "attempt_not_running"}
	}
	mode, err := p.rolloutMode(ctx, t.RolloutID)
	if err != nil {
		return "", &apiError{Status: http.StatusInternalServerError, Message: "rollout mode: " + err.Error()}
	}
	if p.cfg.AuthCacheTTL > 0 && att.Status == store.AttemptRunning {
		p.authMu.Lock()
		if len(p.auth) >= 1<<16 {
			clear(p.auth)
		}
		if !p.auth[t.attempt()].revoked {
			p.auth[t.attempt()] = authEntry{sum: sum, mode: mode, until: time.Now().Add(p.cfg.AuthCacheTTL)}
		}
		p.authMu.Unlock()
	}
	return mode, nil
}

// ForgetKey drops the cached verification of an attempt's scoped key, so
// that a key the store revoked is refused at once by this proxy (other
// replicas within AuthCacheTTL).
func (p *Proxy) ForgetKey(rolloutID, attemptID string) {
	p.authMu.Lock()
	p.auth[Target{RolloutID: rolloutID, AttemptID: attemptID}] = authEntry{revoked: true}
	p.authMu.Unlock()
	p.usage.forget(Target{RolloutID: rolloutID, AttemptID: attemptID})
	p.seeds.forget(Target{RolloutID: rolloutID, AttemptID: attemptID})
}

// trustedAttempt checks that the attempt exists (and runs) without a key.
func (p *Proxy) trustedAttempt(ctx context.Context, t Target, running bool) (store.Mode, *apiError) {
	ro, err := p.st.GetRollout(ctx, t.RolloutID)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return "", &apiError{Status: http.StatusNotFound, Message: "rollout " + t.RolloutID + " not found"}
		}
		return "", &apiError{Status: http.StatusInternalServerError, Message: "get rollout: " + err.Error()}
	}
	for _, a := range ro.Attempts {
		if a.ID != t.AttemptID {
			continue
		}
		if running && a.Status != store.AttemptRunning {
			return "", &apiError{Status: http.StatusConflict, Message: "attempt " + t.AttemptID + " is " + string(a.Status) + ", not running", Code: "attempt_not_running"}
		}
		if ro.Mode == "" {
			return store.ModeTrain, nil
		}
		return ro.Mode, nil
	}
	return "", &apiError{Status: http.StatusNotFound, Message: "attempt " + t.AttemptID + " of rollout " + t.RolloutID + " not found"}
}

// authEntry remembers a verified scoped key (as its SHA-256) for a while.
type authEntry struct {
	sum   [sha256.Size]byte
	mode  store.Mode
	until time.Time
	// revoked marks a key ForgetKey dropped: not cached again (a check
	// that raced the revocation must not re-admit it).
	revoked bool
}

// rolloutMode returns (and caches: it never changes) a rollout's mode.
func (p *Proxy) rolloutMode(ctx context.Context, id string) (store.Mode, error) {
	p.modesMu.RLock()
	m, ok := p.modes[id]
	p.modesMu.RUnlock()
	if ok {
		return m, nil
	}
	ro, err := p.st.GetRollout(ctx, id)
	if err != nil {
		return "", err
	}
	m = ro.Mode
	if m == "" {
		m = store.ModeTrain
	}
	p.modesMu.Lock()
	if len(p.modes) >= 1<<16 {
		clear(p.modes)
	}
	p.modes[id] = m
	p.modesMu.Unlock()
	return m, nil
}

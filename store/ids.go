package store

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"time"
	"unicode/utf8"
)

// NewID returns a random id with the given prefix, e.g. "ro_3f2a…".
func NewID(prefix string) string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// KeyPrefix starts every scoped attempt key, so a leaked key is recognisable.
const KeyPrefix = "agl_sk_"

// NewKey returns a fresh scoped key and the hash to store for it.
func NewKey() (key string, hash []byte) {
	var b [32]byte
	_, _ = rand.Read(b[:])
	key = KeyPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return key, HashKey(key)
}

// HashKey is how scoped keys are stored: never the key itself.
func HashKey(key string) []byte {
	h := sha256.Sum256([]byte(key))
	return h[:]
}

// KeyMatches compares a presented key with a stored hash in constant time.
func KeyMatches(key string, hash []byte) bool {
	return len(hash) == sha256.Size && subtle.ConstantTimeCompare(HashKey(key), hash) == 1
}

// MaxIDLen bounds caller-supplied ids.
const MaxIDLen = 200

// IDAlphabet describes the bytes a caller-supplied rollout or group id may
// hold: those a URL path segment carries unescaped, so every route (the
// LLM routes /r/{rollout}/{attempt}/…, /api/rollouts/{id}/…) and every
// client reach any accepted id as it is.
const IDAlphabet = "A-Z a-z 0-9 - . _ ~ :"

// CheckID returns ErrInvalid naming field unless id is 1 to MaxIDLen bytes
// of IDAlphabet and not "." or ".." (which paths resolve away).
func CheckID(field, id string) error {
	if id == "" || len(id) > MaxIDLen {
		return Errorf(ErrInvalid, "%s must be 1 to %d bytes, got %d", field, MaxIDLen, len(id))
	}
	if id == "." || id == ".." {
		return Errorf(ErrInvalid, "%s %q is not an id", field, id)
	}
	for i := 0; i < len(id); i++ {
		if !idByte(id[i]) {
			return Errorf(ErrInvalid, "%s %q: byte %d (%q) is outside the id alphabet %s", field, id, i, id[i], IDAlphabet)
		}
	}
	return nil
}

func idByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return c == '-' || c == '.' || c == '_' || c == '~' || c == ':'
}

// IDSafe maps s onto the id alphabet, replacing every other byte with '-',
// for ids derived from names (a model "org/name" gives "org-name").
func IDSafe(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !idByte(c) {
			b[i] = '-'
		}
	}
	return string(b)
}

// CheckText returns ErrInvalid naming field unless b is valid UTF-8: text
// and JSON that reach the store are refused at the door rather than stored
// and served back as bytes no JSON client can parse.
func CheckText(field string, b []byte) error {
	if !utf8.Valid(b) {
		return Errorf(ErrInvalid, "%s is not valid UTF-8", field)
	}
	return nil
}

// Normalize validates a NewRollout and fills defaults (id, mode, config,
// JSON fields), returning ErrInvalid naming the bad field.
func (n NewRollout) Normalize() (NewRollout, error) {
	if n.ID == "" {
		n.ID = NewID("ro_")
	}
	if err := CheckID("rollout id", n.ID); err != nil {
		return n, err
	}
	if n.GroupID != "" {
		if err := CheckID("rollout "+n.ID+": group_id", n.GroupID); err != nil {
			return n, err
		}
	}
	if n.Mode == "" {
		n.Mode = ModeTrain
	}
	if !n.Mode.Valid() {
		return n, Errorf(ErrInvalid, "rollout %s: mode %q is not one of train, val", n.ID, n.Mode)
	}
	if len(n.Task) == 0 {
		n.Task = json.RawMessage("null")
	} else if !json.Valid(n.Task) {
		return n, Errorf(ErrInvalid, "rollout %s: task is not valid JSON", n.ID)
	} else if err := CheckText("rollout "+n.ID+": task", n.Task); err != nil {
		return n, err
	}
	if len(n.Metadata) > 0 && !json.Valid(n.Metadata) {
		return n, Errorf(ErrInvalid, "rollout %s: metadata is not valid JSON", n.ID)
	}
	if err := CheckText("rollout "+n.ID+": metadata", n.Metadata); err != nil {
		return n, err
	}
	if n.Step == nil {
		n.Step = StepFromMetadata(n.Metadata)
	}
	if n.Step != nil && *n.Step < 0 {
		return n, Errorf(ErrInvalid, "rollout %s: step %d is negative", n.ID, *n.Step)
	}
	c := n.Config
	if c.TimeoutSeconds < 0 || c.UnresponsiveSeconds < 0 || c.MaxAttempts < 0 {
		return n, Errorf(ErrInvalid, "rollout %s: config values must not be negative", n.ID)
	}
	n.Config = c.WithDefaults()
	return n, nil
}

// StepFromMetadata returns the non-negative integer "step" field of a
// rollout's metadata object, or nil.
func StepFromMetadata(meta json.RawMessage) *int64 {
	if len(meta) == 0 || !bytes.Contains(meta, []byte(`"step"`)) {
		return nil
	}
	var m struct {
		Step *json.Number `json:"step"`
	}
	if json.Unmarshal(meta, &m) != nil || m.Step == nil {
		return nil
	}
	n, err := m.Step.Int64()
	if err != nil || n < 0 {
		return nil
	}
	return &n
}

// ValidateEvents checks events to append and sets missing times to now.
func ValidateEvents(evs []NewEvent, now time.Time) ([]NewEvent, error) {
	out := make([]NewEvent, len(evs))
	for i, e := range evs {
		if e.Type == "" {
			return nil, Errorf(ErrInvalid, "event %d: type is empty", i)
		}
		if len(e.Type) > 100 {
			return nil, Errorf(ErrInvalid, "event %d: type longer than 100 bytes", i)
		}
		if !utf8.ValidString(e.Type) {
			return nil, Errorf(ErrInvalid, "event %d: type is not valid UTF-8", i)
		}
		if len(e.Data) == 0 {
			e.Data = json.RawMessage("null")
		} else if !e.DataValid && !json.Valid(e.Data) {
			return nil, Errorf(ErrInvalid, "event %d (%s): data is not valid JSON", i, e.Type)
		} else if !e.DataValid && !utf8.Valid(e.Data) {
			return nil, Errorf(ErrInvalid, "event %d (%s): data is not valid UTF-8", i, e.Type)
		}
		if e.Time.IsZero() {
			e.Time = now
		}
		out[i] = e
	}
	return out, nil
}

// AttemptOutcome decides what happens to a rollout when its running attempt
// ends with status st: the rollout's next status and error text.
func AttemptOutcome(r Rollout, st AttemptStatus, errMsg string) (RolloutStatus, string) {
	if st == AttemptSucceeded {
		return RolloutSucceeded, ""
	}
	if r.NumAttempts < r.Config.MaxAttempts {
		return RolloutRequeuing, errMsg
	}
	if errMsg == "" {
		errMsg = string(st)
	}
	return RolloutFailed, fmt.Sprintf("attempt %d of %d %s", r.NumAttempts, r.Config.MaxAttempts, errMsg)
}

// Staleness decides whether a running attempt must be reaped at now, and
// with which status and message; ok is false when it may keep running.
func Staleness(r Rollout, a Attempt, now time.Time) (st AttemptStatus, msg string, ok bool) {
	c := r.Config
	if c.TimeoutSeconds > 0 {
		if d := now.Sub(a.StartedAt); d.Seconds() > c.TimeoutSeconds {
			return AttemptTimeout, fmt.Sprintf("timeout: ran %.1fs, limit %gs", d.Seconds(), c.TimeoutSeconds), true
		}
	}
	if c.UnresponsiveSeconds > 0 {
		if d := now.Sub(a.LastHeartbeat); d.Seconds() > c.UnresponsiveSeconds {
			return AttemptUnresponsive, fmt.Sprintf("unresponsive: no heartbeat for %.1fs, limit %gs", d.Seconds(), c.UnresponsiveSeconds), true
		}
	}
	return "", "", false
}

// PageLimit clamps a requested page size: default 100, at most 1000.
func PageLimit(n int) int {
	switch {
	case n <= 0:
		return 100
	case n > 1000:
		return 1000
	}
	return n
}

// Validate checks a model version to register.
func (m Model) Validate() error {
	if m.Name == "" {
		return Errorf(ErrInvalid, "model name is empty")
	}
	if m.Version < 0 {
		return Errorf(ErrInvalid, "model %s: version %d is negative", m.Name, m.Version)
	}
	if !utf8.ValidString(m.Name) {
		return Errorf(ErrInvalid, "model name is not valid UTF-8")
	}
	if len(m.Metadata) > 0 && !json.Valid(m.Metadata) {
		return Errorf(ErrInvalid, "model %s: metadata is not valid JSON", m.Name)
	}
	if err := CheckText("model "+m.Name+": metadata", m.Metadata); err != nil {
		return err
	}
	return nil
}

// NextModelVersion is the version a registration without one gets after
// the latest, last; ErrInvalid once versions are exhausted (never a wrap
// to a negative version).
func NextModelVersion(name string, last int64) (int64, error) {
	if last == math.MaxInt64 {
		return 0, Errorf(ErrInvalid, "model %s: version %d is the last one; register a new name", name, last)
	}
	return last + 1, nil
}

// MaxEventsPerRequest bounds the events one append request may carry, on
// every route (/api and /r/…/events).
const MaxEventsPerRequest = 1000

// Count adds one reaped attempt (ended as st, its rollout moved to next).
func (r *ReapResult) Count(st AttemptStatus, next RolloutStatus) {
	if st == AttemptTimeout {
		r.TimedOut++
	} else {
		r.Unresponsive++
	}
	if next == RolloutRequeuing {
		r.Requeued++
	} else {
		r.Failed++
	}
}

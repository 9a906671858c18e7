// Package store holds agl's source of truth: rollouts, their attempts, the
// append-only events each attempt produced, and registered model versions.
//
// Store is the one interface; sqlite (embedded default) and postgres
// implement it, and storetest is the conformance suite both must pass.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// RolloutStatus is where a rollout is in its life.
//
//	queuing → running → succeeded | failed | cancelled
//	running → requeuing → running (a failed attempt with attempts left)
type RolloutStatus string

const (
	RolloutQueuing   RolloutStatus = "queuing"
	RolloutRunning   RolloutStatus = "running"
	RolloutRequeuing RolloutStatus = "requeuing"
	RolloutSucceeded RolloutStatus = "succeeded"
	RolloutFailed    RolloutStatus = "failed"
	RolloutCancelled RolloutStatus = "cancelled"
)

// Terminal reports whether no further attempt will run.
func (s RolloutStatus) Terminal() bool {
	return s == RolloutSucceeded || s == RolloutFailed || s == RolloutCancelled
}

// Valid reports whether s is a known status.
func (s RolloutStatus) Valid() bool {
	switch s {
	case RolloutQueuing, RolloutRunning, RolloutRequeuing, RolloutSucceeded, RolloutFailed, RolloutCancelled:
		return true
	}
	return false
}

// AttemptStatus is the state of one try at a rollout.
type AttemptStatus string

const (
	AttemptRunning      AttemptStatus = "running"
	AttemptSucceeded    AttemptStatus = "succeeded"
	AttemptFailed       AttemptStatus = "failed"
	AttemptTimeout      AttemptStatus = "timeout"
	AttemptUnresponsive AttemptStatus = "unresponsive"
)

// AttemptStopped is the error of an attempt failed because its controller
// stopped: the harness was cut off, not judged, so the trainer runs the
// rollout again rather than train on it as a failure.
const AttemptStopped = "controller stopped"

// Valid reports whether s is a known attempt status.
func (s AttemptStatus) Valid() bool {
	switch s {
	case AttemptRunning, AttemptSucceeded, AttemptFailed, AttemptTimeout, AttemptUnresponsive:
		return true
	}
	return false
}

// Mode says whether a rollout feeds training or validation.
type Mode string

const (
	ModeTrain Mode = "train"
	ModeVal   Mode = "val"
)

// Valid reports whether m is a known mode.
func (m Mode) Valid() bool { return m == ModeTrain || m == ModeVal }

// Well-known event types, every one agl writes or reads. Any other
// non-empty string is a custom type.
const (
	EventModelRequest = "model_request"
	EventReward       = "reward"
	EventLog          = "log"
	EventSpan         = "span"
	// EventHarnessReward is the diagnostic event that keeps a reward file
	// the evaluator's authority overrode: {"text": the file (redacted,
	// bounded), "bytes": its size}.
	EventHarnessReward = "harness_reward"
	// EventTests and EventSandbox are what the controller appends (with
	// the admin key) for repository tasks: the test-based evaluation and
	// what the sandbox saw.
	EventTests   = "tests"
	EventSandbox = "sandbox"
)

// GatewayOwned reports whether only the gateway itself writes events of
// type t (model calls it served, spans it took in by OTLP): a scoped
// attempt key may not append them on any route.
func GatewayOwned(t string) bool {
	return t == EventModelRequest || t == EventSpan
}

// ControllerOwned reports whether only the controller writes events of
// type t (a repository task's test results and sandbox diagnostics): a
// scoped attempt key may not append them, so that a harness cannot forge
// a test result.
func ControllerOwned(t string) bool {
	return t == EventTests || t == EventSandbox
}

// RolloutConfig bounds how a rollout runs. Zero values take the defaults
// in DefaultRolloutConfig.
type RolloutConfig struct {
	// TimeoutSeconds bounds one attempt's wall time; 0 means no limit.
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty" yaml:"timeout_seconds"`
	// MaxAttempts is how many attempts may run before the rollout fails.
	MaxAttempts int `json:"max_attempts,omitempty" yaml:"max_attempts"`
	// UnresponsiveSeconds: an attempt with no heartbeat for this long is
	// marked unresponsive; 0 means never.
	UnresponsiveSeconds float64 `json:"unresponsive_seconds,omitempty" yaml:"unresponsive_seconds"`
}

// DefaultRolloutConfig is applied to fields left zero at creation.
var DefaultRolloutConfig = RolloutConfig{TimeoutSeconds: 0, MaxAttempts: 1, UnresponsiveSeconds: 60}

// WithDefaults fills zero fields from DefaultRolloutConfig.
func (c RolloutConfig) WithDefaults() RolloutConfig {
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultRolloutConfig.MaxAttempts
	}
	if c.UnresponsiveSeconds == 0 {
		c.UnresponsiveSeconds = DefaultRolloutConfig.UnresponsiveSeconds
	}
	return c
}

// Rollout is one run of a task by a harness, possibly over several attempts.
type Rollout struct {
	ID       string          `json:"id"`
	GroupID  string          `json:"group_id,omitempty"`
	Task     json.RawMessage `json:"task"`
	Mode     Mode            `json:"mode"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Step is the trainer step the rollout belongs to (indexed, so
	// listings filter by it cheaply); nil when it belongs to none.
	Step   *int64        `json:"step,omitempty"`
	Config RolloutConfig `json:"config"`
	Status RolloutStatus `json:"status"`
	// NumAttempts counts attempts started so far.
	NumAttempts int `json:"num_attempts"`
	// Error says why a rollout failed or was cancelled.
	Error string `json:"error,omitempty"`
	// Reward is the primary reward of the attempt that ended it, when one
	// was reported; RewardData is that reward event's data.
	Reward     *float64        `json:"reward,omitempty"`
	RewardData json.RawMessage `json:"reward_data,omitempty"`
	CreatedAt  time.Time       `json:"created_at"`
	UpdatedAt  time.Time       `json:"updated_at"`
	// Seq orders rollouts by creation; TerminalSeq orders them by the
	// moment they became terminal (0 while not terminal). The terminal
	// cursor of Store.Terminal is a TerminalSeq.
	Seq         int64 `json:"seq"`
	TerminalSeq int64 `json:"terminal_seq,omitempty"`
	// Attempts is filled by GetRollout only.
	Attempts []Attempt `json:"attempts,omitempty"`
}

// NewRollout is what a caller supplies to create a rollout. An empty ID gets
// a generated one; a repeated ID returns the existing rollout unchanged.
type NewRollout struct {
	ID       string          `json:"id,omitempty"`
	GroupID  string          `json:"group_id,omitempty"`
	Task     json.RawMessage `json:"task"`
	Mode     Mode            `json:"mode,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Step, when nil, is taken from an integer "step" field of Metadata
	// (what the trainer writes), if there is one.
	Step   *int64        `json:"step,omitempty"`
	Config RolloutConfig `json:"config"`
}

// Attempt is one try at running a rollout.
type Attempt struct {
	ID            string        `json:"id"`
	RolloutID     string        `json:"rollout_id"`
	Number        int           `json:"number"`
	WorkerID      string        `json:"worker_id,omitempty"`
	Status        AttemptStatus `json:"status"`
	StartedAt     time.Time     `json:"started_at"`
	LastHeartbeat time.Time     `json:"last_heartbeat"`
	EndedAt       *time.Time    `json:"ended_at,omitempty"`
	Error         string        `json:"error,omitempty"`
}

// Claim is what a worker gets when it takes a queued rollout: the rollout,
// its new attempt, and the attempt's scoped key (returned once, stored hashed).
type Claim struct {
	Rollout Rollout `json:"rollout"`
	Attempt Attempt `json:"attempt"`
	Key     string  `json:"key"`
}

// ClaimRequest names the worker claiming, and optionally restricts the mode
// or names the one rollout to claim (an external controller starting the
// rollout it was handed: ErrNoneQueued unless that rollout is queued).
type ClaimRequest struct {
	WorkerID  string `json:"worker_id"`
	Mode      Mode   `json:"mode,omitempty"`
	RolloutID string `json:"rollout_id,omitempty"`
}

// Event is one append-only record of something an attempt did.
type Event struct {
	Seq       int64           `json:"seq"`
	RolloutID string          `json:"rollout_id"`
	AttemptID string          `json:"attempt_id"`
	Type      string          `json:"type"`
	Time      time.Time       `json:"time"`
	Data      json.RawMessage `json:"data"`
}

// NewEvent is an event to append; a zero Time is set to now.
type NewEvent struct {
	Type string          `json:"type"`
	Time time.Time       `json:"time,omitempty"`
	Data json.RawMessage `json:"data"`
	// DataValid says Data is valid JSON by construction (the gateway's
	// model_request events: a request body its decoder accepted and
	// encoders fuzzed against encoding/json), so the store need not check
	// it again. Never set from decoded input.
	DataValid bool `json:"-"`
	// Layout, when set, locates the parts of a model_request event's
	// Data that its stored form cuts out, for a writer that built the
	// JSON (the gateway), so that the store need not scan it again (see
	// CallLayout). Never set from decoded input.
	Layout *CallLayout `json:"-"`
	// Encoded, when set, is the stored form the writer already computed
	// against its own cache of bases (the gateway measures a call's
	// stored size before recording it, Bases.Batch). The store reuses it
	// when its own base for the call holds the same ids and request, so
	// that the call is encoded once (EncodeBatch.Encode). Never set from
	// decoded input.
	Encoded *Encoding `json:"-"`
}

// Model is one registered version of a model's weights.
type Model struct {
	Name string `json:"name"`
	// Version is assigned by the store (previous+1) when registered as 0;
	// an explicit version must exceed every earlier one of that name.
	Version   int64           `json:"version"`
	Endpoints []string        `json:"endpoints,omitempty"`
	Weights   string          `json:"weights,omitempty"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
}

// RolloutFilter selects rollouts for ListRollouts. Empty fields match all.
type RolloutFilter struct {
	Status  []RolloutStatus
	GroupID string
	Mode    Mode
	// Step selects rollouts of one trainer step.
	Step *int64
	// MinReward/MaxReward bound the reward summary (rollouts without one
	// are excluded when either is set).
	MinReward, MaxReward *float64
	// Cursor is the Seq to continue after (exclusive), 0 to start.
	Cursor int64
	// Desc lists newest first.
	Desc  bool
	Limit int
}

// EventFilter selects events of one rollout.
type EventFilter struct {
	RolloutID string
	AttemptID string
	Types     []string
	AfterSeq  int64
	Limit     int
	// Desc lists newest first (with Limit: the latest events).
	Desc bool
}

// TrainStep is one trainer step's metrics as the trainer reported them: one
// per (run, mode, step); reporting a step again replaces it (a resumed run
// redoes the steps after its checkpoint).
type TrainStep struct {
	// Run names the training run (the trainer's model name).
	Run  string `json:"run"`
	Mode Mode   `json:"mode"`
	// Step is the number of policy updates done; validation at step s
	// evaluates the weights after s updates.
	Step int64     `json:"step"`
	Time time.Time `json:"time"`
	// Metrics is a JSON object, mostly of numbers: reward_mean,
	// success_rate, rollout_seconds, train_seconds, tokens_per_second,
	// dropped_groups, loss, … (the trainer's StepMetrics).
	Metrics json.RawMessage `json:"metrics"`
}

// Validate checks a step to record.
func (t TrainStep) Validate() error {
	switch {
	case t.Run == "" || len(t.Run) > MaxIDLen:
		return Errorf(ErrInvalid, "train step: run must be 1 to %d bytes", MaxIDLen)
	case !t.Mode.Valid():
		return Errorf(ErrInvalid, "train step: mode %q is not one of train, val", t.Mode)
	case t.Step < 0:
		return Errorf(ErrInvalid, "train step: step %d is negative", t.Step)
	case len(t.Metrics) == 0 || !json.Valid(t.Metrics) || t.Metrics[0] != '{':
		return Errorf(ErrInvalid, "train step: metrics must be a JSON object")
	case !utf8.ValidString(t.Run) || !utf8.Valid(t.Metrics):
		return Errorf(ErrInvalid, "train step: run and metrics must be valid UTF-8")
	}
	return nil
}

// Worker summarises one worker (controller) from its attempts: those
// running now and those started since the time asked about.
type Worker struct {
	ID string `json:"id"`
	// Running counts attempts running now; Attempts those started since
	// the time asked about (running ones included); Failed those of them
	// that ended other than succeeded.
	Running  int `json:"running"`
	Attempts int `json:"attempts"`
	Failed   int `json:"failed"`
	// LastSeen is the latest start of those attempts or heartbeat of a
	// running one.
	LastSeen time.Time `json:"last_seen"`
}

// SortWorkers returns the workers of a map by id.
func SortWorkers(m map[string]*Worker) []Worker {
	out := make([]Worker, 0, len(m))
	for _, w := range m {
		out = append(out, *w)
	}
	slices.SortFunc(out, func(a, b Worker) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// ReapResult says what one reaper pass did.
type ReapResult struct {
	Unresponsive int `json:"unresponsive"`
	TimedOut     int `json:"timed_out"`
	Requeued     int `json:"requeued"`
	Failed       int `json:"failed"`
}

// Counts is the number of rollouts in each status.
type Counts map[RolloutStatus]int64

// Store is the durable source of truth. Every method is safe for concurrent
// use; every write that returns nil is durable across a crash of the process.
type Store interface {
	// CreateRollouts creates rollouts atomically; a rollout whose ID
	// already exists is returned as stored (idempotent creation).
	CreateRollouts(ctx context.Context, rs []NewRollout) ([]Rollout, error)
	// GetRollout returns one rollout with its attempts.
	GetRollout(ctx context.Context, id string) (Rollout, error)
	// ListRollouts pages through rollouts; next is the cursor for the
	// following page, 0 when there is none.
	ListRollouts(ctx context.Context, f RolloutFilter) (rs []Rollout, next int64, err error)
	// CountRollouts counts rollouts by status.
	CountRollouts(ctx context.Context) (Counts, error)
	// CancelRollout cancels a non-terminal rollout and fails its running attempt.
	CancelRollout(ctx context.Context, id, reason string) (Rollout, error)

	// Claim atomically takes the oldest queuing or requeuing rollout,
	// starts an attempt on it and returns a fresh scoped key. It returns
	// ErrNoneQueued when there is nothing to claim.
	Claim(ctx context.Context, req ClaimRequest) (Claim, error)
	// Heartbeat records that a running attempt is alive.
	Heartbeat(ctx context.Context, rolloutID, attemptID string) (Attempt, error)
	// CompleteAttempt ends a running attempt with a final status
	// (succeeded or failed) and moves its rollout on: succeeded → the
	// rollout succeeds; failed → requeued while attempts remain, else failed.
	CompleteAttempt(ctx context.Context, rolloutID, attemptID string, status AttemptStatus, errMsg string) (Rollout, error)
	// AttemptByKey returns the attempt (rolloutID, attemptID) if key is its
	// scoped key, compared in constant time; ErrForbidden otherwise.
	AttemptByKey(ctx context.Context, rolloutID, attemptID, key string) (Attempt, error)
	// RevokeKey makes the attempt's scoped key grant nothing from now on
	// (AttemptByKey answers ErrForbidden), whatever the attempt's status:
	// the controller revokes it when the harness exits, before the
	// evaluator runs. Revoking twice is not an error; an unknown attempt
	// is ErrNotFound.
	RevokeKey(ctx context.Context, rolloutID, attemptID string) error

	// AppendEvents appends events to a running attempt, atomically and in
	// order, and returns them with their sequence numbers.
	AppendEvents(ctx context.Context, rolloutID, attemptID string, evs []NewEvent) ([]Event, error)
	// ListEvents returns a rollout's events in sequence order.
	ListEvents(ctx context.Context, f EventFilter) ([]Event, error)

	// Terminal returns up to limit rollouts that became terminal after the
	// cursor (a TerminalSeq), in the order they did.
	Terminal(ctx context.Context, after int64, limit int) ([]Rollout, error)

	// RegisterModel records a model version.
	RegisterModel(ctx context.Context, m Model) (Model, error)
	// ListModels lists model versions, newest first; name "" lists all.
	ListModels(ctx context.Context, name string) ([]Model, error)

	// PutTrainStep records a trainer step's metrics, replacing an earlier
	// report of the same (run, mode, step).
	PutTrainStep(ctx context.Context, t TrainStep) error
	// ListTrainSteps lists recorded steps by run, mode and step; run ""
	// lists every run.
	ListTrainSteps(ctx context.Context, run string) ([]TrainStep, error)

	// Workers summarises the workers with an attempt running now or
	// started at or after since, by worker id.
	Workers(ctx context.Context, since time.Time) ([]Worker, error)

	// Reap ends attempts that stopped heart-beating or ran past their
	// rollout's timeout (as of now) and requeues or fails their rollouts.
	Reap(ctx context.Context, now time.Time) (ReapResult, error)

	Close() error
}

// EventRecorder is implemented by stores that can make events durable
// faster than AppendEvents commits them (the SQLite store's event journal).
// Once RecordEvents returns nil the events survive a crash of the process
// as an appended event does, come after every event the caller appended or
// recorded before, and are seen by every later read through the store
// (reads wait for them); they only have no sequence numbers yet. Errors
// are those of AppendEvents.
type EventRecorder interface {
	RecordEvents(ctx context.Context, rolloutID, attemptID string, evs []NewEvent) error
}

// StoredBytes is implemented by stores that can tell how many bytes an
// attempt's events of one type take in storage (their stored form, after
// the compact encoding). The gateway's count of an attempt's stored bytes
// (gateway.max_stored_attempt_bytes) starts from it, so that a restart
// does not reset it. Events recorded (EventRecorder) and not yet applied
// count.
type StoredBytes interface {
	StoredEventBytes(ctx context.Context, rolloutID, attemptID, eventType string) (int64, error)
}

// Sentinel errors; wrap them with context. The HTTP layer maps them to
// status codes (404, 409, 403, 400).
var (
	ErrNotFound     = errors.New("not found")
	ErrConflict     = errors.New("conflict")
	ErrForbidden    = errors.New("forbidden")
	ErrInvalid      = errors.New("invalid")
	ErrNoneQueued   = errors.New("no rollout queued")
	ErrStoreClosing = errors.New("store closed")
)

// Errorf wraps a sentinel with a message: Errorf(ErrConflict, "attempt %s is %s", …).
func Errorf(kind error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", kind, fmt.Sprintf(format, args...))
}

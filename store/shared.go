package store

import (
	"context"
	"encoding/json"
	"time"
)

// Shared is what a store that several gateway replicas use at once (the
// PostgreSQL store) offers them beyond Store: a wake-up on changes any
// replica commits, and small named settings every replica applies (the
// pause state of the LLM routes). A single-process store (SQLite) does not
// implement it; its gateway wakes its waiters in process.
type Shared interface {
	// Changed returns a channel closed at the next committed change, by
	// any process, that may end a wait: a rollout created, ended or
	// requeued, a model registered, a setting written. A change can be
	// missed (the notification connection dropped; the channel is closed
	// when it is back), so waiters keep a poll fallback.
	Changed() <-chan struct{}
	// PutSetting stores value (JSON) under name and wakes every replica.
	PutSetting(ctx context.Context, name string, value json.RawMessage) error
	// Setting returns a setting and its version, which every PutSetting
	// of that name increments; (nil, 0) when it was never put.
	Setting(ctx context.Context, name string) (json.RawMessage, int64, error)

	// PutReplica records a gateway replica's state as of now (the
	// store's clock), incrementing its Reports; it wakes nobody.
	PutReplica(ctx context.Context, r Replica) error
	// Replicas lists the replicas that reported within the last within
	// (by the store's clock), by id.
	Replicas(ctx context.Context, within time.Duration) ([]Replica, error)
	// DeleteReplica forgets a replica (one shutting down).
	DeleteReplica(ctx context.Context, id string) error
}

// Replica is one gateway replica's report of itself: what drain waits on
// across replicas and GET /api/gateway lists.
type Replica struct {
	ID       string `json:"id"`
	Paused   bool   `json:"paused"`
	InFlight int    `json:"in_flight"`
	// Reports counts the replica's reports; SeenAt is the latest.
	Reports int64     `json:"reports"`
	SeenAt  time.Time `json:"seen_at"`
}

// WatchSetting calls apply with the value of setting name now (if it was
// ever put) and after every later put, until ctx ends: woken by
// sh.Changed, and re-reading at least every poll (a missed notification
// only delays). A failed read is retried at the next wake-up.
func WatchSetting(ctx context.Context, sh Shared, name string, poll time.Duration, apply func(json.RawMessage)) {
	if poll <= 0 {
		poll = time.Second
	}
	var seen int64
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		changed := sh.Changed()
		if v, ver, err := sh.Setting(ctx, name); err == nil && ver > seen {
			seen = ver
			apply(v)
		}
		t.Reset(poll)
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-t.C:
		}
	}
}

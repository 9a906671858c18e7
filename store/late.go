package store

import "context"

// LateWriter is implemented by stores that can annotate a rollout after its
// attempt ended and remove a rollout for good: what Agent Lightning's API
// needs (its trainer's hooks post events to terminal rollouts; DELETE with
// purge). Both are admin operations; the gateway never offers them to a
// scoped key.
type LateWriter interface {
	// AppendLateEvents appends events to an attempt whatever its status
	// (running or ended), in order, after every event appended before.
	// An unknown rollout or attempt is ErrNotFound.
	AppendLateEvents(ctx context.Context, rolloutID, attemptID string, evs []NewEvent) ([]Event, error)
	// PurgeRollout deletes a rollout with its attempts and events. An
	// unknown id is not an error.
	PurgeRollout(ctx context.Context, id string) error
}

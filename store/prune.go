package store

import (
	"context"
	"time"
)

// PruneFilter says which terminal rollouts Prune deletes (with their
// attempts and events). Rollouts that are not terminal (queuing, running,
// requeuing) are never pruned. OlderThan and BeforeStep select rollouts
// that match all the criteria set; MaxBytes then deletes the oldest
// remaining terminal rollouts (by the moment they became terminal) until
// the stored events of all rollouts take at most MaxBytes. At least one
// must be set.
type PruneFilter struct {
	// OlderThan selects rollouts that became terminal before it.
	OlderThan time.Time
	// BeforeStep selects rollouts of a trainer step below it (rollouts of
	// no step are not selected by it).
	BeforeStep *int64
	// MaxBytes bounds the stored bytes of all events kept; 0: no bound.
	MaxBytes int64
	// DryRun lists what would be deleted and deletes nothing.
	DryRun bool
}

// Set reports whether f selects anything at all.
func (f PruneFilter) Set() bool {
	return !f.OlderThan.IsZero() || f.BeforeStep != nil || f.MaxBytes > 0
}

// PrunedRollout is one rollout Prune deleted (or would delete).
type PrunedRollout struct {
	ID     string        `json:"id"`
	Status RolloutStatus `json:"status"`
	Step   *int64        `json:"step,omitempty"`
	// EndedAt is when it became terminal.
	EndedAt time.Time `json:"ended_at"`
	Events  int64     `json:"events"`
	// Bytes is what its events take as stored.
	Bytes int64 `json:"bytes"`
}

// PruneResult says what Prune did.
type PruneResult struct {
	Rollouts []PrunedRollout `json:"rollouts"`
	// Bytes is the stored bytes of the pruned rollouts' events; Kept what
	// the events left take.
	Bytes int64 `json:"bytes"`
	Kept  int64 `json:"kept_bytes"`
	// FileBytesBefore and FileBytesAfter are the database's size on disk
	// around the deletion and the space reclamation that follows it
	// (SQLite incremental vacuum or VACUUM; PostgreSQL VACUUM, which makes
	// the space reusable without shrinking the files); 0 on a dry run.
	FileBytesBefore int64 `json:"file_bytes_before,omitempty"`
	FileBytesAfter  int64 `json:"file_bytes_after,omitempty"`
}

// Pruner is implemented by stores that can delete old rollouts and
// reclaim their space (both backends).
type Pruner interface {
	Prune(ctx context.Context, f PruneFilter) (PruneResult, error)
}

// SelectPrune picks what f deletes among the terminal rollouts cands
// (sorted oldest terminal first), given the stored bytes of all events;
// both backends list the candidates and delete what it picked.
func SelectPrune(f PruneFilter, cands []PrunedRollout, total int64) PruneResult {
	res := PruneResult{Rollouts: []PrunedRollout{}}
	taken := make([]bool, len(cands))
	if !f.OlderThan.IsZero() || f.BeforeStep != nil {
		for i, c := range cands {
			if !f.OlderThan.IsZero() && !c.EndedAt.Before(f.OlderThan) {
				continue
			}
			if f.BeforeStep != nil && (c.Step == nil || *c.Step >= *f.BeforeStep) {
				continue
			}
			taken[i] = true
			res.Bytes += c.Bytes
		}
	}
	if f.MaxBytes > 0 {
		for i, c := range cands {
			if total-res.Bytes <= f.MaxBytes {
				break
			}
			if !taken[i] {
				taken[i] = true
				res.Bytes += c.Bytes
			}
		}
	}
	for i, c := range cands {
		if taken[i] {
			res.Rollouts = append(res.Rollouts, c)
		}
	}
	res.Kept = total - res.Bytes
	return res
}

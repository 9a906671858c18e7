package samples

import (
	"cmp"
	"slices"
)

// Batch is a set of samples a trainer processes together, padded to the
// length of its longest sample. Samples keep everything they carry (group,
// rollout, versions, weights), so a batch needs nothing else.
type Batch struct {
	Samples []*Sample
	// MaxLen is the longest sample's length; Padded = len(Samples)·MaxLen
	// is what a padded [batch, MaxLen] tensor holds; Tokens the real ones.
	MaxLen, Tokens, Padded int
}

// PackStats summarises a packing.
type PackStats struct {
	Batches int `json:"batches"`
	// Tokens are real tokens, Padded the padded tensor sizes summed.
	Tokens, Padded int
	// Oversize counts samples longer than the budget (each alone in a batch).
	Oversize int `json:"oversize"`
}

// PaddingFraction is 1 − Tokens/Padded.
func (p PackStats) PaddingFraction() float64 {
	if p.Padded == 0 {
		return 0
	}
	return 1 - float64(p.Tokens)/float64(p.Padded)
}

// Pack packs samples into batches whose padded size (samples × longest
// length) is at most budget tokens, by first-fit decreasing: samples are
// sorted by length, longest first (ties by rollout id and index, so the
// result is deterministic), and each goes into the first batch it fits.
// Because lengths decrease, a batch's MaxLen is its first sample's length
// and a batch accepts k samples while k·MaxLen ≤ budget, which groups
// similar lengths together and keeps padding low. A sample longer than
// budget gets a batch of its own (counted in Oversize). maxSamples > 0 also
// bounds the samples per batch. Samples with no tokens are skipped.
func Pack(ss []Sample, budget, maxSamples int) ([]Batch, PackStats) {
	order := make([]*Sample, 0, len(ss))
	for i := range ss {
		if len(ss[i].IDs) > 0 {
			order = append(order, &ss[i])
		}
	}
	slices.SortStableFunc(order, func(a, b *Sample) int {
		if c := cmp.Compare(len(b.IDs), len(a.IDs)); c != 0 {
			return c
		}
		if c := cmp.Compare(a.RolloutID, b.RolloutID); c != 0 {
			return c
		}
		return cmp.Compare(a.Index, b.Index)
	})
	var bs []Batch
	var st PackStats
	for _, s := range order {
		l := len(s.IDs)
		placed := false
		if l <= budget {
			for i := range bs {
				b := &bs[i]
				if b.MaxLen > budget || (maxSamples > 0 && len(b.Samples) >= maxSamples) {
					continue
				}
				if (len(b.Samples)+1)*b.MaxLen <= budget {
					b.Samples = append(b.Samples, s)
					b.Tokens += l
					b.Padded += b.MaxLen
					placed = true
					break
				}
			}
		} else {
			st.Oversize++
		}
		if !placed {
			bs = append(bs, Batch{Samples: []*Sample{s}, MaxLen: l, Tokens: l, Padded: l})
		}
	}
	st.Batches = len(bs)
	for _, b := range bs {
		st.Tokens += b.Tokens
		st.Padded += b.Padded
	}
	return bs, st
}

// Package seed derives the sampling seeds of a seeded training run. The
// trainer gives each rollout it creates a seed in its metadata (the
// "seed" field), derived from the run's seed and the rollout's place in
// the run (step, task, group member); the gateway derives each call's
// sampling seed from that, the attempt's number and the call's place
// among its agent's calls of the attempt. None of it depends on
// scheduling, so two runs with the same seed, data, model and config
// sample the same tokens, as far as the engine's float results do not
// depend on scheduling either.
package seed

import (
	"encoding/json"
	"hash/fnv"
)

// Mix folds parts into one seed with SplitMix64 steps. The result is
// never 0 (0 means "unseeded" to the engines).
func Mix(parts ...uint64) uint64 {
	h := uint64(0x243f6a8885a308d3)
	for _, p := range parts {
		h = splitmix(h ^ splitmix(p))
	}
	if h == 0 {
		h = 1
	}
	return h
}

// String turns a name (an agent's) into a part for Mix.
func String(s string) uint64 {
	f := fnv.New64a()
	f.Write([]byte(s))
	return f.Sum64()
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// FromMetadata returns the "seed" field of a rollout's metadata: 0 when
// there is none or it is not an unsigned integer (an unseeded rollout).
func FromMetadata(metadata json.RawMessage) uint64 {
	if len(metadata) == 0 {
		return 0
	}
	var m struct {
		Seed uint64 `json:"seed"`
	}
	if json.Unmarshal(metadata, &m) != nil {
		return 0
	}
	return m.Seed
}

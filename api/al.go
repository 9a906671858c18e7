package api

import "encoding/json"

// ALMetadataKey is the reserved key of an agl rollout's metadata that
// holds an Agent Lightning rollout's config (gateway/al writes it, the
// controller reads it): {"config": ALRolloutConfig}.
const ALMetadataKey = "_al"

// ALRolloutConfig is Agent Lightning v1.0's RolloutConfig.
type ALRolloutConfig struct {
	TimeoutSeconds int            `json:"timeout_seconds"`
	Local          *ALLocalConfig `json:"local"`
	K8s            *ALK8sConfig   `json:"k8s"`
}

// ALLocalConfig is AL's RolloutLocalConfig: the agent class its local
// worker runs ("module:Class" or "module.Class") and environment variables
// taken from the rollout's input (env_map: NAME → "input", "input.a.0", or
// a literal).
type ALLocalConfig struct {
	AgentClass *string           `json:"agent_class"`
	EnvMap     map[string]string `json:"env_map"`
}

// ALK8sConfig is AL's RolloutK8sConfig.
type ALK8sConfig struct {
	JobTemplate *string `json:"job_template"`
}

// ALSpec returns the AL config kept in a rollout's metadata, if it is an
// Agent Lightning rollout.
func ALSpec(metadata json.RawMessage) (ALRolloutConfig, bool) {
	var m map[string]json.RawMessage
	if len(metadata) == 0 || json.Unmarshal(metadata, &m) != nil {
		return ALRolloutConfig{}, false
	}
	raw, ok := m[ALMetadataKey]
	if !ok {
		return ALRolloutConfig{}, false
	}
	var s struct {
		Config ALRolloutConfig `json:"config"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return ALRolloutConfig{}, false
	}
	return s.Config, true
}

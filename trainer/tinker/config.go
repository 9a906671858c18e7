package tinker

import (
	"bytes"
	"context"
	"fmt"
	"os"

	"go.yaml.in/yaml/v3"

	"github.com/aglrl/agl/trainer"
)

// Config is the `tinker:` block of a policy of kind tinker. The loss's
// clip, the learning rate, ppo_epochs and micro_batch_tokens come from
// `trainer:`; the API key from the environment variable APIKeyEnv.
type Config struct {
	BaseModel string `yaml:"base_model"`
	// BaseURL is the service (default $TINKER_BASE_URL).
	BaseURL string `yaml:"base_url"`
	// APIKeyEnv names the environment variable holding the API key
	// (default TINKER_API_KEY). The key itself never appears in a config.
	APIKeyEnv string `yaml:"api_key_env"`
	LoRA      struct {
		Rank         int    `yaml:"rank"`
		Seed         *int64 `yaml:"seed"`
		TrainMLP     *bool  `yaml:"train_mlp"`
		TrainAttn    *bool  `yaml:"train_attn"`
		TrainUnembed *bool  `yaml:"train_unembed"`
	} `yaml:"lora"`
	// Loss is importance_sampling, ppo (default) or cross_entropy.
	Loss string `yaml:"loss"`
	// Adam's other parameters (the SDK's defaults when unset).
	Beta1        *float64 `yaml:"beta1"`
	Beta2        *float64 `yaml:"beta2"`
	Eps          *float64 `yaml:"eps"`
	WeightDecay  float64  `yaml:"weight_decay"`
	GradClipNorm float64  `yaml:"grad_clip_norm"`
	// MaxContext is the base model's context length (prompt + response).
	MaxContext int `yaml:"max_context"`
	// Server names the service's loss semantics: tinker (default),
	// skyrl-jax or skyrl-train (Options.Server).
	Server string `yaml:"server"`
}

// Open connects to the service and opens policy name (see New): the
// `trainer:` section tc gives the loss and optimizer settings.
func (c Config) Open(ctx context.Context, name string, tc trainer.Config, resumeDir string, version int64) (*Policy, error) {
	url := c.BaseURL
	if url == "" {
		url = os.Getenv("TINKER_BASE_URL")
	}
	env := c.APIKeyEnv
	if env == "" {
		env = "TINKER_API_KEY"
	}
	key := os.Getenv(env)
	if key == "" {
		return nil, fmt.Errorf("tinker policy %s: the API key variable %s is not set", name, env)
	}
	cl, err := NewClient(url, key)
	if err != nil {
		return nil, fmt.Errorf("tinker policy %s: %w", name, err)
	}
	def := func(p *bool) bool { return p == nil || *p }
	adam := DefaultAdam()
	for _, x := range []struct {
		dst *float64
		src *float64
	}{{&adam.Beta1, c.Beta1}, {&adam.Beta2, c.Beta2}, {&adam.Eps, c.Eps}} {
		if x.src != nil {
			*x.dst = *x.src
		}
	}
	adam.WeightDecay, adam.GradClipNorm = c.WeightDecay, c.GradClipNorm
	o, err := OptionsFrom(tc, Options{Name: name, BaseModel: c.BaseModel, Loss: c.Loss, Adam: adam, MaxContext: c.MaxContext, Server: c.Server,
		LoRA: LoRA{Rank: c.LoRA.Rank, Seed: c.LoRA.Seed, TrainMLP: def(c.LoRA.TrainMLP), TrainAttn: def(c.LoRA.TrainAttn),
			TrainUnembed: def(c.LoRA.TrainUnembed)}})
	if err != nil {
		return nil, err
	}
	return New(ctx, cl, o, resumeDir, version)
}

// LoadConfig reads a YAML file holding a tinker block (the keys of
// policies.<name>.tinker), refusing unknown keys: agl sft --tinker.
func LoadConfig(path string) (Config, error) {
	var c Config
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("tinker config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("tinker config %s: %w", path, err)
	}
	if c.BaseModel == "" {
		return c, fmt.Errorf("tinker config %s: no base_model", path)
	}
	return c, nil
}

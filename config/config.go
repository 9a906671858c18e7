// Package config loads agl's YAML configuration. Precedence, lowest first:
// defaults, the YAML file, AGL_* environment variables, command-line flags
// (applied by the command that owns them).
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is the whole file. Sections belong to the component named.
type Config struct {
	// DataDir holds the SQLite store, checkpoints and metrics (default .agl).
	DataDir string  `yaml:"data_dir"`
	Store   Store   `yaml:"store"`
	Gateway Gateway `yaml:"gateway"`
	// Rest keeps sections owned by other components (engine, proxy,
	// controller, trainer); each decodes its own with Section.
	Rest map[string]yaml.Node `yaml:",inline"`
}

// Store selects the store backend.
type Store struct {
	// URL: empty for SQLite at DATA_DIR/agl.db; "sqlite:PATH"; or
	// "postgres://…" for PostgreSQL.
	URL string `yaml:"url"`
	// Synchronous is SQLite's durability level: NORMAL (default) or FULL.
	Synchronous string `yaml:"synchronous"`
}

// Gateway configures the HTTP server.
type Gateway struct {
	// Listen is host:port (default DefaultListen; agl train: a free
	// loopback port).
	Listen string `yaml:"listen"`
	// AdminKey guards the API; without one the gateway binds loopback only.
	AdminKey     string        `yaml:"admin_key"`
	MaxBodyBytes int64         `yaml:"max_body_bytes"`
	ReapInterval time.Duration `yaml:"reap_interval"`
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// MaxAbsReward bounds |reward| of appended reward events on every
	// route (default 1e6, api.DefaultMaxAbsReward).
	MaxAbsReward float64 `yaml:"max_abs_reward"`
	// MaxStoredCallBytes and MaxStoredAttemptBytes bound what one model
	// call, and all calls of one attempt, may add to the store, measured
	// on the stored (compact) form (0: defaults 8 MiB and 256 MiB;
	// negative: none). See docs/operations/isolation.md.
	MaxStoredCallBytes    int64 `yaml:"max_stored_call_bytes"`
	MaxStoredAttemptBytes int64 `yaml:"max_stored_attempt_bytes"`
	// WaitPoll is how often long-polls re-read the store when nothing
	// woke them (default 250ms; 2s on PostgreSQL, where LISTEN/NOTIFY
	// wakes them and the poll is only a safety net).
	WaitPoll time.Duration `yaml:"wait_poll"`
	// Client limits (0: the gateway's defaults, negative: none).
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"` // default 10s
	ReadBodyTimeout   time.Duration `yaml:"read_body_timeout"`   // default 60s
	WriteTimeout      time.Duration `yaml:"write_timeout"`       // per write, default 60s
	IdleTimeout       time.Duration `yaml:"idle_timeout"`        // default 120s
	MaxHeaderBytes    int           `yaml:"max_header_bytes"`    // default 1 MiB
	MaxConns          int           `yaml:"max_conns"`           // default 4096
	MaxConnsPerIP     int           `yaml:"max_conns_per_ip"`    // default 1024
}

// DefaultListen is where agl gateway listens without gateway.listen.
const DefaultListen = "127.0.0.1:8080"

// Default returns the built-in configuration.
func Default() Config {
	return Config{
		DataDir: ".agl",
		Gateway: Gateway{MaxBodyBytes: 32 << 20, ReapInterval: 2 * time.Second, DrainTimeout: 30 * time.Second},
	}
}

// Load reads path (if not empty) over the defaults, then applies the
// environment. Unknown keys in the known sections are errors.
func Load(path string) (Config, error) {
	c := Default()
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return c, fmt.Errorf("config: %w", err)
		}
		if err := decodeStrict(b, &c); err != nil {
			return c, fmt.Errorf("config %s: %w", path, err)
		}
		// Relative data dirs are relative to the config file.
		if c.DataDir != "" && !filepath.IsAbs(c.DataDir) && c.DataDir != Default().DataDir {
			c.DataDir = filepath.Join(filepath.Dir(path), c.DataDir)
		}
	}
	c.ApplyEnv(os.Getenv)
	return c, nil
}

func decodeStrict(b []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// ApplyEnv overrides fields from AGL_* variables.
func (c *Config) ApplyEnv(getenv func(string) string) {
	set := func(dst *string, name string) {
		if v := getenv(name); v != "" {
			*dst = v
		}
	}
	set(&c.DataDir, "AGL_DATA_DIR")
	set(&c.Store.URL, "AGL_STORE_URL")
	set(&c.Gateway.Listen, "AGL_LISTEN")
	set(&c.Gateway.AdminKey, "AGL_ADMIN_KEY")
}

// Section decodes the named extra section into v strictly; absent sections
// leave v unchanged.
func (c Config) Section(name string, v any) error {
	n, ok := c.Rest[name]
	if !ok {
		return nil
	}
	b, err := yaml.Marshal(&n)
	if err != nil {
		return fmt.Errorf("config section %s: %w", name, err)
	}
	if err := decodeStrict(b, v); err != nil {
		return fmt.Errorf("config section %s: %w", name, err)
	}
	return nil
}

// StorePath returns the SQLite file path when the store is SQLite.
func (c Config) StorePath() (string, bool) {
	u := c.Store.URL
	switch {
	case u == "":
		return filepath.Join(c.DataDir, "agl.db"), true
	case strings.HasPrefix(u, "sqlite://"):
		return strings.TrimPrefix(u, "sqlite://"), true
	case strings.HasPrefix(u, "sqlite:"):
		return strings.TrimPrefix(u, "sqlite:"), true
	}
	return "", false
}

package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "agl.yaml")
	os.WriteFile(p, []byte("data_dir: d\ngateway:\n  listen: 127.0.0.1:9\n  reap_interval: 5s\ntrainer:\n  steps: 3\n"), 0o644)
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != filepath.Join(dir, "d") || c.Gateway.Listen != "127.0.0.1:9" || c.Gateway.ReapInterval != 5*time.Second {
		t.Errorf("loaded %+v", c)
	}
	if c.Gateway.DrainTimeout != 30*time.Second {
		t.Errorf("default lost: %v", c.Gateway.DrainTimeout)
	}
	var tr struct {
		Steps int `yaml:"steps"`
	}
	if err := c.Section("trainer", &tr); err != nil || tr.Steps != 3 {
		t.Errorf("section: %v %+v", err, tr)
	}
	var bad struct{}
	if err := c.Section("trainer", &bad); err == nil || !strings.Contains(err.Error(), "steps") {
		t.Errorf("unknown key in section not reported: %v", err)
	}
	if p, ok := c.StorePath(); !ok || p != filepath.Join(dir, "d", "agl.db") {
		t.Errorf("store path %s %v", p, ok)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "agl.yaml")
	os.WriteFile(p, []byte("gateway:\n  lisen: x\n"), 0o644)
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "lisen") {
		t.Errorf("typo not reported: %v", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("missing file accepted")
	}
}

func TestEnv(t *testing.T) {
	c := Default()
	env := map[string]string{"AGL_ADMIN_KEY": "k", "AGL_STORE_URL": "postgres://x", "AGL_LISTEN": "0.0.0.0:1"}
	c.ApplyEnv(func(k string) string { return env[k] })
	if c.Gateway.AdminKey != "k" || c.Store.URL != "postgres://x" || c.Gateway.Listen != "0.0.0.0:1" {
		t.Errorf("env not applied: %+v", c)
	}
	if _, ok := c.StorePath(); ok {
		t.Error("postgres URL taken for sqlite")
	}
}

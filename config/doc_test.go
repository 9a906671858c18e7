package config_test

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/aglrl/agl/config"
	"github.com/aglrl/agl/controller"
	"github.com/aglrl/agl/gateway/al"
	"github.com/aglrl/agl/internal/doccheck"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/trainer"
)

// TestConfigKeysDocumented checks docs/reference/config.md's table against
// the config types outside package app, both ways: every key they decode
// is documented, and every documented key of their sections is decoded.
// The engine and policies sections and controller.kubernetes (types that
// only package app imports) are checked in app's TestConfigKeysDocumented.
func TestConfigKeysDocumented(t *testing.T) {
	sections := []struct {
		name string // "" for the top level of the file
		typ  reflect.Type
	}{
		{"", reflect.TypeFor[config.Config]()},
		{"proxy", reflect.TypeFor[proxy.Config]()},
		{"controller", reflect.TypeFor[controller.Section]()},
		{"trainer", reflect.TypeFor[trainer.Config]()},
		{"al", reflect.TypeFor[al.Config]()},
	}
	const elsewhere = "controller.kubernetes"
	var code []string
	owned := map[string]bool{}
	for _, s := range sections {
		keys, err := doccheck.Keys(s.name, s.typ, map[string]reflect.Type{elsewhere: nil})
		if err != nil {
			t.Fatal(err)
		}
		code = append(code, keys...)
		for _, k := range keys {
			sec, _, _ := strings.Cut(k, ".")
			owned[sec] = true
		}
	}
	root, err := doccheck.Root()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := doccheck.DocKeys(filepath.Join(root, "docs", "reference", "config.md"))
	if err != nil {
		t.Fatal(err)
	}
	ours := func(k string) bool {
		sec, _, _ := strings.Cut(k, ".")
		return owned[sec] && !strings.HasPrefix(k, elsewhere+".")
	}
	for _, d := range doccheck.Compare(code, doc, ours) {
		t.Error(d)
	}
	// Sections whose types live in package main, checked there.
	inMain := map[string]bool{"engine": true, "policies": true}
	for k, line := range doc {
		if sec, _, _ := strings.Cut(k, "."); !owned[sec] && !inMain[sec] {
			t.Errorf("key %s (line %d) is in the doc's table but no config section %s exists", k, line, sec)
		}
	}
	if len(code) < 100 {
		t.Errorf("found %d keys in the config types; the walk lost some", len(code))
	}
}

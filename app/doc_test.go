package app

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/aglrl/agl/controller/kubernetes"
	"github.com/aglrl/agl/internal/doccheck"
)

// TestConfigKeysDocumented checks docs/reference/config.md's table, both
// ways, for the config types that live in package app (the engine and
// policies sections) and controller.kubernetes (decoded only here); the
// other sections are checked in package config.
func TestConfigKeysDocumented(t *testing.T) {
	sections := []struct {
		name string
		typ  reflect.Type
	}{
		{"engine", reflect.TypeFor[EngineConfig]()},
		{"policies", reflect.TypeFor[map[string]PolicyConfig]()},
		{"controller.kubernetes", reflect.TypeFor[kubernetes.Section]()},
	}
	var code []string
	for _, s := range sections {
		keys, err := doccheck.Keys(s.name, s.typ, nil)
		if err != nil {
			t.Fatal(err)
		}
		code = append(code, keys...)
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
		for _, s := range sections {
			if strings.HasPrefix(k, s.name+".") {
				return true
			}
		}
		return false
	}
	for _, d := range doccheck.Compare(code, doc, ours) {
		t.Error(d)
	}
	if len(code) < 30 {
		t.Errorf("found %d keys in the config types; the walk lost some", len(code))
	}
}

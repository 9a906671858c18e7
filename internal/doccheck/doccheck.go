// Package doccheck keeps the documentation honest from tests: it lists the
// YAML keys a config type decodes (by reflection over its yaml tags), reads
// the keys documented in docs/reference/config.md's table, and finds
// relative markdown links that lead nowhere.
package doccheck

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Keys returns the dotted YAML keys that a value of type t decodes under
// prefix: one per leaf (a scalar, a list of scalars, a map of scalars).
// A list of structs adds "[]" to its key (engine.upstream.models[].name), a
// map of structs ".<name>" (policies.<name>.kind); a struct field that is
// itself a section (a struct, or a pointer to one) is walked, not listed.
// An inline map (config.Config's Rest) holds other sections and is skipped.
// A yaml.Node field, decoded later by another type, is walked as nodes
// names it by its key; a nil type there means its keys are checked
// elsewhere. A yaml.Node not in nodes, or a type that contains itself, is
// an error.
func Keys(prefix string, t reflect.Type, nodes map[string]reflect.Type) ([]string, error) {
	w := walker{nodes: nodes, open: map[reflect.Type]bool{}}
	if err := w.walk(prefix, t); err != nil {
		return nil, err
	}
	sort.Strings(w.out)
	return w.out, nil
}

var nodeType = reflect.TypeFor[yaml.Node]()

type walker struct {
	nodes map[string]reflect.Type
	open  map[reflect.Type]bool // struct types being walked
	out   []string
}

func (w *walker) walk(prefix string, t reflect.Type) error {
	t = deref(t)
	if t == nodeType {
		sub, ok := w.nodes[prefix]
		if !ok {
			return fmt.Errorf("doccheck: key %s is a yaml.Node: name the type that decodes it", prefix)
		}
		if sub == nil {
			return nil
		}
		t = deref(sub)
	}
	switch t.Kind() {
	case reflect.Struct:
		if w.open[t] {
			return fmt.Errorf("doccheck: key %s: type %s contains itself", prefix, t)
		}
		w.open[t] = true
		defer delete(w.open, t)
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() && !f.Anonymous { // as yaml.v3 does
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" {
				continue
			}
			if strings.Contains(opts, "inline") {
				if deref(f.Type).Kind() != reflect.Struct {
					continue
				}
				if err := w.walk(prefix, f.Type); err != nil {
					return err
				}
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name) // yaml.v3's default
			}
			if err := w.walk(join(prefix, name), f.Type); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice, reflect.Array:
		if e := deref(t.Elem()); e.Kind() == reflect.Struct {
			return w.walk(prefix+"[]", e)
		}
	case reflect.Map:
		if e := deref(t.Elem()); e.Kind() == reflect.Struct {
			return w.walk(join(prefix, "<name>"), e)
		}
	}
	w.out = append(w.out, prefix)
	return nil
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// keyCell is a table row's first cell: a key in backquotes.
var keyCell = regexp.MustCompile("^\\|\\s*`([^`]+)`\\s*\\|")

// DocKeys reads the keys of the markdown tables in the file at path: the
// first cell of each row, in backquotes. It returns them with the line each
// is on, and an error for a key listed twice.
func DocKeys(path string) (map[string]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("doccheck: %w", err)
	}
	defer f.Close()
	keys := map[string]int{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		m := keyCell.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		if first, dup := keys[m[1]]; dup {
			return nil, fmt.Errorf("doccheck: %s:%d: key %s already listed on line %d", path, n, m[1], first)
		}
		keys[m[1]] = n
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("doccheck: read %s: %w", path, err)
	}
	return keys, nil
}

// Compare checks that every key of code is documented and every documented
// key that owned accepts (the keys of the types the caller walked) is in
// code. It returns one line per difference, sorted.
func Compare(code []string, doc map[string]int, owned func(key string) bool) []string {
	in := map[string]bool{}
	for _, k := range code {
		in[k] = true
	}
	var diffs []string
	for _, k := range code {
		if _, ok := doc[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("key %s is in the code but not in the doc's table", k))
		}
	}
	for k, line := range doc {
		if owned(k) && !in[k] {
			diffs = append(diffs, fmt.Sprintf("key %s (line %d) is in the doc's table but no config type decodes it", k, line))
		}
	}
	sort.Strings(diffs)
	return diffs
}

// Root returns the module root: the first directory holding go.mod at or
// above the working directory.
func Root() (string, error) {
	dir, err := filepath.Abs(".")
	if err != nil {
		return "", fmt.Errorf("doccheck: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("doccheck: no go.mod above the working directory")
		}
		dir = up
	}
}

// link matches an inline markdown link or image: [text](target).
var link = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// BrokenLinks returns, for the markdown files given (paths relative to
// root), every relative link whose file or folder does not exist, as
// "FILE:LINE: TARGET". Links with a scheme (https:, mailto:) and pure
// anchors (#…) are not checked; a link's own anchor is ignored. Text in
// code (fenced blocks and `spans`) is not a link.
func BrokenLinks(root string, files []string) ([]string, error) {
	var broken []string
	for _, rel := range files {
		f, err := os.Open(filepath.Join(root, rel))
		if err != nil {
			return nil, fmt.Errorf("doccheck: %w", err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		fenced := false
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fenced = !fenced
				continue
			}
			if fenced {
				continue
			}
			for _, m := range link.FindAllStringSubmatch(stripCode(line), -1) {
				target := m[1]
				if strings.HasPrefix(target, "#") || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				target, _, _ = strings.Cut(target, "#")
				p := filepath.Join(root, filepath.Dir(rel), filepath.FromSlash(target))
				if _, err := os.Stat(p); err != nil {
					broken = append(broken, fmt.Sprintf("%s:%d: %s", rel, n, m[1]))
				}
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("doccheck: read %s: %w", rel, err)
		}
	}
	return broken, nil
}

// stripCode blanks `code spans` of a line.
func stripCode(line string) string {
	var b strings.Builder
	in := false
	for _, r := range line {
		if r == '`' {
			in = !in
			continue
		}
		if !in {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Markdown returns README.md and every .md file under docs/, relative to
// root, sorted.
func Markdown(root string) ([]string, error) {
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("doccheck: list docs: %w", err)
	}
	sort.Strings(files[1:])
	return files, nil
}

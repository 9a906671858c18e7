package proxy

import (
	"encoding/json"
	"testing"
)

// FuzzStringFast: a JSON string decodes as encoding/json decodes it.
func FuzzStringFast(f *testing.F) {
	for _, s := range []string{`"a"`, `"caf\u00e9 \ud83d\ude00\n"`, `"\ud800"`, "\"\xff\"", `"a" `, `"a"x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := stringFast(data)
		if !ok {
			return
		}
		var want string
		if err := json.Unmarshal(data, &want); err != nil || got != want {
			t.Fatalf("%q: fast %q, encoding/json %q (%v)", data, got, want, err)
		}
	})
}

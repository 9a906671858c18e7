package dashboard

import (
	"testing"
	"time"
)

func TestSessionExpiry(t *testing.T) {
	d := New(Options{AdminKey: "k"})
	now := time.Unix(1_700_000_000, 0)
	v := d.session(now.Add(time.Hour))
	if !d.validSession(v, now) {
		t.Fatal("fresh session rejected")
	}
	if d.validSession(v, now.Add(time.Hour)) || d.validSession(v, now.Add(2*time.Hour)) {
		t.Error("expired session accepted")
	}
	for _, bad := range []string{"", ".", "x.y", "123", v + "0", "1" + v} {
		if d.validSession(bad, now) {
			t.Errorf("%q accepted", bad)
		}
	}
	if New(Options{AdminKey: "other"}).validSession(v, now) {
		t.Error("a session of another admin key accepted")
	}
}

package controller

import (
	"net/url"
	"testing"
)

// TestDoorAllows: the sandbox's gateway door passes only the attempt's
// own model routes, in canonical form.
func TestDoorAllows(t *testing.T) {
	prefix := "/r/R1/A1/"
	cases := []struct {
		raw  string
		want bool
	}{
		{"/r/R1/A1/v1/chat/completions", true},
		{"/r/R1/A1/v1/responses", true},
		{"/r/R1/A1/v1/messages?beta=true", true},
		{"/r/R1/A1/events", false},
		{"/r/R1/A1/events/", false},
		{"/r/R1/A1/v1/../events", false},
		{"/r/R1/A1/./events", false},
		{"/r/R1/A1//events", false},
		{"/r/R1/A1/v1%2F..%2Fevents", false},
		{"/r/R1/A2/v1/chat/completions", false},
		{"/r/R1/A1", false},
		{"/api/rollouts", false},
		{"/proxy/rollout/R1/attempt/A1/mode/train/openai/v1/chat/completions", false},
		{"/r/R1/A1/../A2/v1/chat/completions", false},
	}
	for _, c := range cases {
		u, err := url.ParseRequestURI(c.raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := doorAllows(prefix, u); got != c.want {
			t.Errorf("%s: allowed %v, want %v", c.raw, got, c.want)
		}
	}
}

package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/gateway"
	"github.com/aglrl/agl/store"
)

// TestEventsByAgent: GET /api/rollouts/{id}/events?agent= lists the
// model_request events recorded for that agent, across store pages, with
// limit and after honoured; a bad name is a 400 in the /api error shape.
func TestEventsByAgent(t *testing.T) {
	t.Parallel()
	srv, st := newServer(t, gateway.Options{})
	c := ctx(t)
	if _, err := st.CreateRollouts(c, []store.NewRollout{{ID: "ro", Task: json.RawMessage(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	cl, err := st.Claim(c, store.ClaimRequest{WorkerID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	agents := []string{"writer", "checker", ""}
	const n = 1200 // more than one store page (500) per agent
	for k := 0; k < n; k += 100 {
		var evs []store.NewEvent
		for i := k; i < k+100; i++ {
			mc := api.ModelCall{CallID: fmt.Sprintf("c%d", i), Agent: agents[i%3]}
			b, _ := json.Marshal(mc)
			evs = append(evs, store.NewEvent{Type: store.EventModelRequest, Data: b})
			if i%10 == 0 {
				evs = append(evs, store.NewEvent{Type: "span", Data: json.RawMessage(`{"agent":"writer"}`)})
			}
		}
		if _, err := st.AppendEvents(c, cl.Rollout.ID, cl.Attempt.ID, evs); err != nil {
			t.Fatal(err)
		}
	}
	get := func(q string) (int, []store.Event, string) {
		req, _ := http.NewRequest("GET", srv.URL+"/api/rollouts/ro/events?"+q, nil)
		req.Header.Set("Authorization", "Bearer "+admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var out api.EventsResponse
		json.Unmarshal(b, &out)
		return resp.StatusCode, out.Events, string(b)
	}
	cases := []struct {
		q      string
		status int
		count  int
		first  string // call id of the first event
	}{
		{"agent=writer", 200, n / 3, "c0"},
		{"agent=checker&limit=5", 200, 5, "c1"},
		{"agent=writer&type=model_request&limit=700", 200, n / 3, "c0"},
		{"agent=writer&type=reward", 200, 0, ""},
		{"agent=nobody", 200, 0, ""},
		{"agent=bad!", 400, 0, ""},
		{"agent=", 400, 0, ""},
	}
	for _, tc := range cases {
		st, evs, body := get(tc.q)
		if st != tc.status {
			t.Fatalf("%s: status %d, want %d: %.300s", tc.q, st, tc.status, body)
		}
		if st != 200 {
			var e struct {
				Error struct{ Code, Message string }
			}
			if json.Unmarshal([]byte(body), &e) != nil || e.Error.Code == "" || e.Error.Message == "" {
				t.Errorf("%s: not an /api error: %s", tc.q, body)
			}
			continue
		}
		if len(evs) != tc.count {
			t.Fatalf("%s: %d events, want %d", tc.q, len(evs), tc.count)
		}
		for _, e := range evs {
			var mc api.ModelCall
			if e.Type != store.EventModelRequest || json.Unmarshal(e.Data, &mc) != nil || "agent="+mc.Agent != tc.q[:len("agent=")+len(mc.Agent)] {
				t.Fatalf("%s: event %d (%s) %.100s", tc.q, e.Seq, e.Type, e.Data)
			}
		}
		if tc.first != "" {
			var mc api.ModelCall
			json.Unmarshal(evs[0].Data, &mc)
			if mc.CallID != tc.first {
				t.Errorf("%s: first call %s, want %s", tc.q, mc.CallID, tc.first)
			}
		}
	}
	// after= pages on: the writer's events after the 100th one.
	_, evs, _ := get("agent=writer")
	_, rest, _ := get(fmt.Sprintf("agent=writer&after=%d", evs[99].Seq))
	if len(rest) != n/3-100 || rest[0].Seq != evs[100].Seq {
		t.Errorf("after: %d events", len(rest))
	}
}

package gateway_test

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/gateway"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/store"
)

// TestRevokeKey: after the admin revokes an attempt's key, the key does
// nothing (not even on a gateway that cached it), while the admin still
// completes the attempt; a scoped key cannot revoke.
func TestRevokeKey(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, gateway.Options{})
	c := ctx(t)
	adm := api.NewClient(srv.URL, admin)
	if _, err := adm.CreateRollouts(c, []store.NewRollout{{ID: "a"}}); err != nil {
		t.Fatal(err)
	}
	cl, _, err := adm.Claim(c, store.ClaimRequest{WorkerID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	k := api.NewClient(srv.URL, cl.Key)
	if got := statusOf(k.RevokeKey(c, "a", cl.Attempt.ID)); got != 403 {
		t.Errorf("scoped key revoking: %d, want 403", got)
	}
	if _, err := k.Heartbeat(c, "a", cl.Attempt.ID); err != nil {
		t.Fatalf("before revoke: %v", err)
	}
	if err := adm.RevokeKey(c, "a", cl.Attempt.ID); err != nil {
		t.Fatal(err)
	}
	if got := statusOf(adm.RevokeKey(c, "a", "at_nope")); got != 404 {
		t.Errorf("revoke unknown attempt: %d, want 404", got)
	}
	ev := []store.NewEvent{{Type: store.EventReward, Data: json.RawMessage(`1`)}}
	if _, err := k.AppendEvents(c, "a", cl.Attempt.ID, ev); statusOf(err) != 403 {
		t.Errorf("append with a revoked key: %v, want 403", err)
	}
	if _, err := k.Heartbeat(c, "a", cl.Attempt.ID); statusOf(err) != 403 {
		t.Errorf("heartbeat with a revoked key: %v, want 403", err)
	}
	if _, err := adm.Complete(c, "a", cl.Attempt.ID, store.AttemptSucceeded, ""); err != nil {
		t.Errorf("complete after revoke: %v", err)
	}
}

// TestScopedKeyIsHarnessWithoutAdminKey: on a gateway with no admin key
// (everything open, loopback only), a scoped key still may not forge
// gateway-owned events.
func TestScopedKeyIsHarnessWithoutAdminKey(t *testing.T) {
	t.Parallel()
	st := testutil.SQLite(t)
	srv := httptest.NewServer(gateway.New(gateway.Options{Store: st}))
	t.Cleanup(srv.Close)
	c := ctx(t)
	open := api.NewClient(srv.URL, "")
	if _, err := open.CreateRollouts(c, []store.NewRollout{{ID: "a"}}); err != nil {
		t.Fatal(err)
	}
	cl, _, err := open.Claim(c, store.ClaimRequest{WorkerID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	forged := []store.NewEvent{{Type: store.EventModelRequest, Data: json.RawMessage(`{}`)}}
	if _, err := api.NewClient(srv.URL, cl.Key).AppendEvents(c, "a", cl.Attempt.ID, forged); statusOf(err) != 403 {
		t.Errorf("scoped key forging model_request: %v, want 403", err)
	}
	if evs, _ := open.ListEvents(c, store.EventFilter{RolloutID: "a"}); len(evs) != 0 {
		t.Errorf("%d events stored", len(evs))
	}
}

package dashboard_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/dashboard"
	"github.com/aglrl/agl/store"
)

// TestConversationErrorRecord: a refused call shows in the conversation
// with its status and error body, and the call after it still continues
// the conversation.
func TestConversationErrorRecord(t *testing.T) {
	e := newEnv(t, admin)
	cl := e.claim(t, store.NewRollout{ID: "refused"}, "w")
	e.eng.Push(chat.Message{Role: chat.RoleAssistant, Content: "Hello."}, chat.Message{Role: chat.RoleAssistant, Content: "Bye."})
	e.rawPost(t, cl, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"Hi"}]}`, nil)
	req, _ := http.NewRequestWithContext(testCtx(t), "POST", e.srv.URL+"/r/"+cl.Rollout.ID+"/"+cl.Attempt.ID+"/v1/chat/completions", strings.NewReader(`{"model":`))
	req.Header.Set("Authorization", "Bearer "+cl.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("bad body: %d", resp.StatusCode)
	}
	e.rawPost(t, cl, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello."},{"role":"user","content":"Go"}]}`, nil)

	var v dashboard.RolloutView
	if st, body := e.get(t, "/api/dashboard/rollouts/refused", admin, &v); st != 200 {
		t.Fatalf("%d %s", st, body)
	}
	if len(v.Calls) != 3 {
		t.Fatalf("%d calls, want 3", len(v.Calls))
	}
	if c := v.Calls[1]; c.HTTPStatus != 400 || !strings.Contains(c.Refusal, "malformed JSON") || c.Error != "" || len(c.New) != 0 || c.Reply != nil {
		t.Errorf("refused call %+v", c)
	}
	if c := v.Calls[2]; c.HTTPStatus != 0 || c.Rewritten || c.Context != 2 || len(c.New) != 1 || c.New[0].Text != "Go" {
		t.Errorf("call after the refusal: context %d rewritten %v new %+v", c.Context, c.Rewritten, c.New)
	}
}

package dashboard_test

import (
	"testing"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/dashboard"
	"github.com/aglrl/agl/store"
)

// TestConversationAgents: interleaved calls of two agents each continue
// their own agent's conversation in the view, and name their agent.
func TestConversationAgents(t *testing.T) {
	e := newEnv(t, admin)
	cl := e.claim(t, store.NewRollout{ID: "two-agents"}, "w")
	reply := func(s string) chat.Message { return chat.Message{Role: chat.RoleAssistant, Content: s} }
	e.eng.Push(reply("SQL 1"), reply("no"), reply("SQL 2"), reply("yes"))
	e.rawPost(t, cl, "/agents/writer/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"Write."}]}`, nil)
	e.rawPost(t, cl, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"Check SQL 1."}]}`, map[string]string{"X-Agl-Agent": "checker"})
	e.rawPost(t, cl, "/agents/writer/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"Write."},{"role":"assistant","content":"SQL 1"},{"role":"user","content":"Rejected."}]}`, nil)
	e.rawPost(t, cl, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"Check SQL 1."},{"role":"assistant","content":"no"},{"role":"user","content":"Check SQL 2."}]}`, map[string]string{"X-Agl-Agent": "checker"})
	var v dashboard.RolloutView
	if st, body := e.get(t, "/api/dashboard/rollouts/two-agents", admin, &v); st != 200 {
		t.Fatalf("%d %s", st, body)
	}
	if len(v.Calls) != 4 {
		t.Fatalf("%d calls", len(v.Calls))
	}
	for k, want := range []string{"writer", "checker", "writer", "checker"} {
		c := v.Calls[k]
		if c.Agent != want {
			t.Errorf("call %d: agent %q, want %q", k+1, c.Agent, want)
		}
		if k >= 2 && (c.Rewritten || c.Context != 2 || len(c.New) != 1) {
			t.Errorf("call %d: context %d rewritten %v new %+v: does not continue its agent's conversation", k+1, c.Context, c.Rewritten, c.New)
		}
	}
}

package proxy_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/samples"
	"github.com/aglrl/agl/store"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestThreeAgents drives a three-agent harness through the real openai-go
// SDK: the writer names itself by path (a per-agent base URL), the checker
// by the X-Agl-Agent header, the rewriter by its model name (proxy.agents).
// Every call's event records its agent; each agent keeps its own token
// state (the checker's first conversation extends the writer's, yet is not
// continued from it); and samples built with train_agents [writer,
// rewriter] give loss mask 1 to exactly those agents' response tokens.
func TestThreeAgents(t *testing.T) {
	e := newEnv(t, proxy.Config{Agents: map[string]string{"rewriter-model": "rewriter"}}, nil)
	cl := e.claim(t, store.ModeTrain)
	ctx := testCtx(t)
	writer := openai.NewClient(option.WithBaseURL(base(e.srv, cl)+"/agents/writer/v1"), option.WithAPIKey(cl.Key), option.WithMaxRetries(0))
	checker := openai.NewClient(option.WithBaseURL(base(e.srv, cl)+"/v1"), option.WithAPIKey(cl.Key), option.WithMaxRetries(0),
		option.WithHeader(proxy.AgentHeader, "checker"))
	rewriter := openai.NewClient(option.WithBaseURL(base(e.srv, cl)+"/v1"), option.WithAPIKey(cl.Key), option.WithMaxRetries(0))

	type agent struct {
		client *openai.Client
		model  string
		msgs   []openai.ChatCompletionMessageParamUnion
	}
	w := &agent{&writer, "gpt-4o", []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Write SQL."), openai.UserMessage("How many users?")}}
	c := &agent{&checker, "gpt-4o", nil}
	r := &agent{&rewriter, "rewriter-model", []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Fix: SELECT count(*) FROM user")}}
	turn := func(a *agent, reply string) string {
		t.Helper()
		e.eng.Push(text(reply))
		resp, err := a.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: a.model, Messages: a.msgs})
		if err != nil {
			t.Fatal(err)
		}
		got := resp.Choices[0].Message.Content
		a.msgs = append(a.msgs, openai.AssistantMessage(got))
		return got
	}
	sql := turn(w, "SELECT count(*) FROM user")
	// The checker sees the writer's whole exchange: its conversation extends
	// the writer's, but it is another agent's and must not continue it.
	c.msgs = append(append(c.msgs, w.msgs...), openai.UserMessage("Check this query: "+sql))
	turn(c, "reject: no table user")
	turn(r, "SELECT count(*) FROM users")
	w.msgs = append(w.msgs, openai.UserMessage("The checker rejected it."))
	turn(w, "SELECT count(*) FROM users")
	c.msgs = append(c.msgs, openai.UserMessage("And now?"))
	turn(c, "accept")
	r.msgs = append(r.msgs, openai.UserMessage("Shorter please."))
	turn(r, "SELECT count(*) FROM users;")

	calls := e.calls(t, cl)
	want := []struct {
		agent     string
		continued bool
		reason    string
	}{
		{"writer", false, proxy.ReasonFirstCall},
		{"checker", false, proxy.ReasonNoTokenState},
		{"rewriter", false, proxy.ReasonFirstCall},
		{"writer", true, ""},
		{"checker", true, ""},
		{"rewriter", true, ""},
	}
	if len(calls) != len(want) {
		t.Fatalf("%d calls recorded, want %d", len(calls), len(want))
	}
	respTokens := map[string]int{}
	for i, wnt := range want {
		got := calls[i]
		if got.Agent != wnt.agent || got.Continued != wnt.continued || got.RenderReason != wnt.reason {
			t.Errorf("call %d: agent %q continued=%v reason=%q, want %q %v %q", i, got.Agent, got.Continued, got.RenderReason, wnt.agent, wnt.continued, wnt.reason)
		}
		respTokens[got.Agent] += len(got.ResponseIDs)
	}
	// The raw event names the agent exactly once, as "agent".
	evs, err := e.st.ListEvents(ctx, store.EventFilter{RolloutID: cl.Rollout.ID, Types: []string{store.EventModelRequest}})
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(evs[0].Data), `"agent":"writer"`); n != 1 {
		t.Errorf("writer's event has %d agent fields: %.300s", n, evs[0].Data)
	}

	// Samples: train the writer and the rewriter, keep the checker frozen.
	if _, err := e.st.AppendEvents(ctx, cl.Rollout.ID, cl.Attempt.ID, []store.NewEvent{{Type: store.EventReward, Data: json.RawMessage(`{"value":1}`)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.CompleteAttempt(ctx, cl.Rollout.ID, cl.Attempt.ID, store.AttemptSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	ro, err := e.st.GetRollout(ctx, cl.Rollout.ID)
	if err != nil {
		t.Fatal(err)
	}
	all, err := e.st.ListEvents(ctx, store.EventFilter{RolloutID: cl.Rollout.ID})
	if err != nil {
		t.Fatal(err)
	}
	res, err := samples.FromRollouts([]store.Rollout{ro}, map[string][]store.Event{ro.ID: all},
		samples.Config{TrainAgents: []string{"writer", "rewriter"}, Aggregation: samples.DefaultAggregation})
	if err != nil {
		t.Fatal(err)
	}
	trained := map[string]int{}
	for _, s := range res.Samples {
		if len(s.CallIDs) != 2 {
			t.Errorf("agent %q: sample of %d calls, want the agent's 2 calls merged", s.Agent, len(s.CallIDs))
		}
		trained[s.Agent] += s.Trained()
	}
	if trained["writer"] != respTokens["writer"] || trained["rewriter"] != respTokens["rewriter"] || trained["checker"] != 0 || len(trained) != 2 {
		t.Errorf("trained tokens by agent %v, want writer %d, rewriter %d, no checker", trained, respTokens["writer"], respTokens["rewriter"])
	}
	if res.Stats.TrainedByAgent["writer"] != trained["writer"] || res.Stats.Excluded["frozen_agent"] != 2 {
		t.Errorf("stats: trained by agent %v, excluded %v", res.Stats.TrainedByAgent, res.Stats.Excluded)
	}
}

// TestAgentPrecedence: path > header > model mapping > default, on every
// API shape; bad agent names are refused in the route's error shape and
// nothing is recorded for them.
func TestAgentPrecedence(t *testing.T) {
	e := newEnv(t, proxy.Config{Agents: map[string]string{"mapped": "bymodel"}}, nil)
	cl := e.claim(t, store.ModeTrain)
	b := base(e.srv, cl)
	chatBody := func(model string) string {
		return `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`
	}
	msgBody := `{"model":"mapped","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`
	rsBody := `{"model":"mapped","input":"hi"}`
	hdr := func(agent string) map[string]string {
		h := bearer(cl.Key)
		h["anthropic-version"] = "2023-06-01"
		if agent != "" {
			h[proxy.AgentHeader] = agent
		}
		return h
	}
	cases := []struct {
		name, url, header, body string
		status                  int
		agent                   string
		anthropic               bool
	}{
		{"path beats header", b + "/agents/p1/v1/chat/completions", "h1", chatBody("mapped"), 200, "p1", false},
		{"header beats model", b + "/v1/chat/completions", "h2", chatBody("mapped"), 200, "h2", false},
		{"model mapping", b + "/v1/chat/completions", "", chatBody("mapped"), 200, "bymodel", false},
		{"default agent", b + "/v1/chat/completions", "", chatBody("other"), 200, "", false},
		{"anthropic path", b + "/agents/a.1/v1/messages", "", msgBody, 200, "a.1", true},
		{"anthropic model mapping", b + "/v1/messages", "", msgBody, 200, "bymodel", true},
		{"responses header", b + "/v1/responses", "r_2", rsBody, 200, "r_2", false},
		{"completions path", b + "/agents/c-3/v1/completions", "", `{"model":"m","prompt":[1,2,3],"max_tokens":3}`, 200, "c-3", false},
		{"bad path name", b + "/agents/bad!/v1/chat/completions", "", chatBody("m"), 400, "", false},
		{"bad path name anthropic", b + "/agents/bad!/v1/messages", "", msgBody, 400, "", true},
		{"empty path name", b + "/agents//v1/chat/completions", "", chatBody("m"), 400, "", false},
		{"dot path name", b + "/agents/.x/v1/chat/completions", "", chatBody("m"), 400, "", false},
		{"long path name", b + "/agents/" + strings.Repeat("a", api.MaxAgentNameLen+1) + "/v1/chat/completions", "", chatBody("m"), 400, "", false},
		{"bad header", b + "/v1/chat/completions", "a b", chatBody("m"), 400, "", false},
		{"bad header anthropic", b + "/v1/messages", "ü", msgBody, 400, "", true},
		{"agent on events route", b + "/agents/x/events", "", `{"type":"x"}`, 404, "", false},
	}
	recorded := 0
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.status == 200 {
				e.eng.Push(text("ok"))
			}
			st, _, body := post(t, http.MethodPost, c.url, hdr(c.header), c.body)
			if st != c.status {
				t.Fatalf("status %d, want %d: %s", st, c.status, body)
			}
			if st != 200 {
				var oa struct {
					Error struct{ Message, Type string }
				}
				var an struct {
					Type  string
					Error struct{ Type, Message string }
				}
				ok := false
				if c.anthropic {
					ok = json.Unmarshal([]byte(body), &an) == nil && an.Type == "error" && an.Error.Message != ""
				} else {
					ok = json.Unmarshal([]byte(body), &oa) == nil && oa.Error.Message != "" && oa.Error.Type != ""
				}
				if !ok {
					t.Fatalf("not an API-shaped error (anthropic %v): %s", c.anthropic, body)
				}
				if st == 400 && !strings.Contains(body, "agent") {
					t.Errorf("error does not name the agent: %s", body)
				}
				return
			}
			recorded++
			calls := e.calls(t, cl)
			if len(calls) != recorded {
				t.Fatalf("%d calls recorded, want %d", len(calls), recorded)
			}
			if got := calls[len(calls)-1].Agent; got != c.agent {
				t.Errorf("agent %q, want %q", got, c.agent)
			}
		})
	}
}

// TestAgentConfigValidate: proxy.agents values must be valid agent names.
func TestAgentConfigValidate(t *testing.T) {
	for _, c := range []struct {
		agents map[string]string
		ok     bool
	}{
		{nil, true},
		{map[string]string{"gpt-4o": "writer", "claude": "checker_2.b"}, true},
		{map[string]string{"gpt-4o": ""}, false},
		{map[string]string{"gpt-4o": "has space"}, false},
		{map[string]string{"gpt-4o": "a/b"}, false},
	} {
		err := proxy.Config{Agents: c.agents}.Validate()
		if (err == nil) != c.ok {
			t.Errorf("%v: err %v, want ok %v", c.agents, err, c.ok)
		}
	}
}

package dashboard_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/dashboard"
	"github.com/aglrl/agl/store"
)

func login(t *testing.T, e *env, key string) (*http.Response, string) {
	t.Helper()
	resp, err := noRedirect.PostForm(e.srv.URL+"/login", url.Values{"key": {key}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp, b.String()
}

func withCookie(t *testing.T, e *env, method, path string, c *http.Cookie) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(testCtx(t), method, e.srv.URL+path, nil)
	if c != nil {
		req.AddCookie(c)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, resp.Header, b.String()
}

func TestAuth(t *testing.T) {
	e := newEnv(t, admin)
	cl := e.claim(t, store.NewRollout{ID: "r1"}, "w")

	// Logging in: wrong key, a scoped key, the admin key.
	resp, body := login(t, e, "nope")
	if resp.StatusCode != 401 || !strings.Contains(body, "Wrong key") || len(resp.Cookies()) != 0 {
		t.Fatalf("wrong key: %d %v %q", resp.StatusCode, resp.Cookies(), body)
	}
	resp, body = login(t, e, cl.Key)
	if resp.StatusCode != 401 || !strings.Contains(body, "scoped") || len(resp.Cookies()) != 0 {
		t.Fatalf("scoped key: %d %v", resp.StatusCode, resp.Cookies())
	}
	resp, _ = login(t, e, admin)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" || len(resp.Cookies()) != 1 {
		t.Fatalf("admin login: %d %q %v", resp.StatusCode, resp.Header.Get("Location"), resp.Cookies())
	}
	session := resp.Cookies()[0]
	if session.Name != dashboard.CookieName || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Path != "/" || session.MaxAge <= 0 {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/, a max age", session)
	}
	if strings.Contains(session.Value, admin) {
		t.Errorf("the cookie holds the admin key")
	}
	tampered := *session
	tampered.Value = session.Value[:len(session.Value)-1] + map[bool]string{true: "0", false: "1"}[strings.HasSuffix(session.Value, "1")]
	later := *session
	exp, _, _ := strings.Cut(session.Value, ".")
	later.Value = fmt.Sprint(exp, "9") + session.Value[len(exp):] // a longer life, same signature
	other := newEnv(t, "another-key")
	resp, _ = login(t, other, "another-key")
	foreign := resp.Cookies()[0]

	cases := []struct {
		name   string
		method string
		path   string
		cookie *http.Cookie
		bearer string
		status int
		want   string // in the body, or the Location header for redirects
	}{
		{"page without login", "GET", "/", nil, "", http.StatusSeeOther, "/login"},
		{"page with session", "GET", "/", session, "", 200, `<script src="/assets/app.js">`},
		{"page with tampered session", "GET", "/", &tampered, "", http.StatusSeeOther, "/login"},
		{"page with extended session", "GET", "/", &later, "", http.StatusSeeOther, "/login"},
		{"page with another gateway's session", "GET", "/", foreign, "", http.StatusSeeOther, "/login"},
		{"login page", "GET", "/login", nil, "", 200, `name="key"`},
		{"assets are public", "GET", "/assets/app.js", nil, "", 200, "textContent"},
		{"view without login", "GET", "/api/dashboard/rollouts", nil, "", 401, `"code":"unauthorized"`},
		{"view with session", "GET", "/api/dashboard/rollouts", session, "", 200, `"rollouts"`},
		{"view with tampered session", "GET", "/api/dashboard/state", &tampered, "", 401, "unauthorized"},
		{"view with admin bearer", "GET", "/api/dashboard/state", nil, admin, 200, `"gateway"`},
		{"view with wrong bearer", "GET", "/api/dashboard/state", nil, "wrong", 401, "unauthorized"},
		{"view with scoped key", "GET", "/api/dashboard/rollouts/r1", nil, cl.Key, 401, "unauthorized"},
		{"tokens without login", "GET", "/api/dashboard/rollouts/r1/tokens", nil, "", 401, "unauthorized"},
		{"train without login", "GET", "/api/dashboard/train", nil, "", 401, "unauthorized"},
		{"workers without login", "GET", "/api/dashboard/workers", nil, "", 401, "unauthorized"},
		// The gateway's own routes are unchanged.
		{"api health", "GET", "/api/health", nil, "", 200, `"ok"`},
		{"api needs the bearer, not the cookie", "GET", "/api/rollouts", session, "", 401, "unauthorized"},
		{"unknown api route", "GET", "/api/nothing", nil, admin, 404, "no_route"},
		{"unknown page", "GET", "/nothing", session, "", 404, ""},
		{"metrics of llm routes untouched", "GET", "/r/r1/" + cl.Attempt.ID + "/v1/models", nil, cl.Key, 200, "agl-test"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(testCtx(t), tc.method, e.srv.URL+tc.path, nil)
			if tc.cookie != nil {
				req.AddCookie(tc.cookie)
			}
			if tc.bearer != "" {
				req.Header.Set("Authorization", "Bearer "+tc.bearer)
			}
			resp, err := noRedirect.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var b strings.Builder
			buf := make([]byte, 1<<16)
			for {
				n, err := resp.Body.Read(buf)
				b.Write(buf[:n])
				if err != nil {
					break
				}
			}
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b.String())
			}
			got := b.String()
			if resp.StatusCode == http.StatusSeeOther {
				got = resp.Header.Get("Location")
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("%q does not contain %q", got, tc.want)
			}
			if strings.HasPrefix(tc.path, "/api/dashboard/") && resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("content type %q", resp.Header.Get("Content-Type"))
			}
			if tc.path == "/" && tc.status == 200 && !strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
				t.Errorf("no CSP on the page: %q", resp.Header.Get("Content-Security-Policy"))
			}
		})
	}

	// Logging out clears the cookie.
	st, hdr, _ := withCookie(t, e, "POST", "/logout", session)
	if st != http.StatusSeeOther || !strings.Contains(hdr.Get("Set-Cookie"), dashboard.CookieName+"=;") || !strings.Contains(hdr.Get("Set-Cookie"), "Max-Age=0") {
		t.Errorf("logout: %d %q", st, hdr.Get("Set-Cookie"))
	}
}

func TestOpenWithoutAdminKey(t *testing.T) {
	e := newEnv(t, "")
	if st, _ := e.get(t, "/", "", nil); st != 200 {
		t.Errorf("page without an admin key: %d", st)
	}
	if st, _ := e.get(t, "/api/dashboard/state", "", nil); st != 200 {
		t.Errorf("view without an admin key: %d", st)
	}
	st, hdr, _ := withCookie(t, e, "GET", "/login", nil)
	if st != http.StatusSeeOther || hdr.Get("Location") != "/" {
		t.Errorf("login page without an admin key: %d %q", st, hdr.Get("Location"))
	}
}

// fill creates rollouts of several steps, modes, groups and outcomes and
// returns them as stored.
func fill(t *testing.T, e *env) []store.Rollout {
	t.Helper()
	ctx := testCtx(t)
	var in []store.NewRollout
	for i := 0; i < 40; i++ {
		mode := store.ModeTrain
		if i%4 == 3 {
			mode = store.ModeVal
		}
		in = append(in, store.NewRollout{ID: fmt.Sprintf("f%02d", i), GroupID: fmt.Sprintf("g%d", i%5), Mode: mode,
			Task:     json.RawMessage(fmt.Sprintf(`{"n":%d,"text":"%s"}`, i, strings.Repeat("long ", 60))),
			Metadata: json.RawMessage(fmt.Sprintf(`{"step":%d}`, i/10))})
	}
	if _, err := e.st.CreateRollouts(ctx, in); err != nil {
		t.Fatal(err)
	}
	// The first 30 run: rewards i/30; every third fails.
	for i := 0; i < 30; i++ {
		c, err := e.st.Claim(ctx, store.ClaimRequest{WorkerID: fmt.Sprint("w", i%2)})
		if err != nil {
			t.Fatal(err)
		}
		e.keys = append(e.keys, c.Key)
		st := store.AttemptSucceeded
		if i%3 == 2 {
			st = store.AttemptFailed
		}
		e.finish(t, c, float64(i)/30, st)
	}
	rs, _, err := e.st.ListRollouts(ctx, store.RolloutFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func ids(rows []dashboard.RolloutRow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

func TestRolloutsFilters(t *testing.T) {
	e := newEnv(t, admin)
	all := fill(t, e)
	slices.Reverse(all) // the list is newest first
	where := func(keep func(r store.Rollout) bool) []string {
		var out []string
		for _, r := range all {
			if keep(r) {
				out = append(out, r.ID)
			}
		}
		return out
	}
	rw := func(r store.Rollout) float64 {
		if r.Reward == nil {
			return -1
		}
		return *r.Reward
	}
	cases := []struct {
		query string
		want  []string
	}{
		{"", where(func(store.Rollout) bool { return true })},
		{"status=succeeded", where(func(r store.Rollout) bool { return r.Status == store.RolloutSucceeded })},
		{"status=failed,queuing", where(func(r store.Rollout) bool { return r.Status == store.RolloutFailed || r.Status == store.RolloutQueuing })},
		{"status=failed&status=queuing", where(func(r store.Rollout) bool { return r.Status == store.RolloutFailed || r.Status == store.RolloutQueuing })},
		{"mode=val", where(func(r store.Rollout) bool { return r.Mode == store.ModeVal })},
		{"group=g2", where(func(r store.Rollout) bool { return r.GroupID == "g2" })},
		{"step=2", where(func(r store.Rollout) bool { return *r.Step == 2 })},
		{"step=9", nil},
		{"min_reward=0.5", where(func(r store.Rollout) bool { return rw(r) >= 0.5 })},
		{"max_reward=0.2", where(func(r store.Rollout) bool { return r.Reward != nil && rw(r) <= 0.2 })},
		{"min_reward=0.3&max_reward=0.6", where(func(r store.Rollout) bool { return rw(r) >= 0.3 && rw(r) <= 0.6 })},
		{"step=1&status=succeeded&mode=train", where(func(r store.Rollout) bool {
			return *r.Step == 1 && r.Status == store.RolloutSucceeded && r.Mode == store.ModeTrain
		})},
		{"order=asc&step=0", func() []string {
			w := where(func(r store.Rollout) bool { return *r.Step == 0 })
			slices.Reverse(w)
			return w
		}()},
	}
	for _, tc := range cases {
		t.Run(tc.query, func(t *testing.T) {
			var page dashboard.RolloutsPage
			if st, body := e.get(t, "/api/dashboard/rollouts?limit=200&"+tc.query, admin, &page); st != 200 {
				t.Fatalf("%d %s", st, body)
			}
			if got := ids(page.Rollouts); !slices.Equal(got, tc.want) {
				t.Errorf("got %v\nwant %v", got, tc.want)
			}
			if page.NextCursor != 0 {
				t.Errorf("next cursor %d on the last page", page.NextCursor)
			}
			for _, r := range page.Rollouts {
				if len([]rune(r.Task)) > 161 {
					t.Errorf("task preview of %d runes", len([]rune(r.Task)))
				}
			}
		})
	}
	bad := []struct{ query, mention string }{
		{"status=bogus", "bogus"}, {"mode=test", "mode"}, {"step=-1", "step"}, {"step=x", "step"},
		{"min_reward=high", "min_reward"}, {"cursor=x", "cursor"}, {"order=up", "order"}, {"limit=0.5", "limit"},
	}
	for _, tc := range bad {
		t.Run("bad "+tc.query, func(t *testing.T) {
			var eb api.ErrorBody
			st, body := e.get(t, "/api/dashboard/rollouts?"+tc.query, admin, nil)
			if err := json.Unmarshal([]byte(body), &eb); st != 400 || err != nil || eb.Error.Code != "invalid_request" || !strings.Contains(eb.Error.Message, tc.mention) {
				t.Errorf("%d %s", st, body)
			}
		})
	}
}

func TestRolloutsPaging(t *testing.T) {
	e := newEnv(t, admin)
	all := fill(t, e)
	for _, tc := range []struct {
		query string
		want  func() []string
	}{
		{"order=desc", func() []string {
			var w []string
			for i := len(all) - 1; i >= 0; i-- {
				w = append(w, all[i].ID)
			}
			return w
		}},
		{"order=asc", func() []string {
			var w []string
			for _, r := range all {
				w = append(w, r.ID)
			}
			return w
		}},
		{"status=succeeded", func() []string {
			var w []string
			for i := len(all) - 1; i >= 0; i-- {
				if all[i].Status == store.RolloutSucceeded {
					w = append(w, all[i].ID)
				}
			}
			return w
		}},
	} {
		t.Run(tc.query, func(t *testing.T) {
			var seen []string
			cursor, pages := int64(0), 0
			for {
				var page dashboard.RolloutsPage
				if st, body := e.get(t, fmt.Sprintf("/api/dashboard/rollouts?limit=7&cursor=%d&%s", cursor, tc.query), admin, &page); st != 200 {
					t.Fatalf("%d %s", st, body)
				}
				pages++
				if len(page.Rollouts) > 7 {
					t.Fatalf("page of %d", len(page.Rollouts))
				}
				seen = append(seen, ids(page.Rollouts)...)
				if page.NextCursor == 0 {
					break
				}
				cursor = page.NextCursor
			}
			if want := tc.want(); !slices.Equal(seen, want) {
				t.Errorf("paged %v\nwant %v", seen, want)
			}
			if pages != (len(seen)+6)/7 && !(len(seen)%7 == 0 && pages == len(seen)/7+1) {
				t.Errorf("%d pages for %d rollouts", pages, len(seen))
			}
		})
	}
}

// TestRolloutView: a rollout whose events came from a real tool-calling
// conversation through the proxy shows each call's new messages, the
// tool call, the tool result and the streamed reply.
func TestRolloutView(t *testing.T) {
	e := newEnv(t, admin)
	cl := e.weatherRollout(t, "weather-1", 4, "Paris", 1)
	var v dashboard.RolloutView
	if st, body := e.get(t, "/api/dashboard/rollouts/weather-1", admin, &v); st != 200 {
		t.Fatalf("%d %s", st, body)
	}
	if v.Rollout.ID != "weather-1" || v.Rollout.Status != store.RolloutSucceeded || v.Attempt != cl.Attempt.ID || len(v.Rollout.Attempts) != 1 {
		t.Fatalf("rollout %+v attempt %s", v.Rollout, v.Attempt)
	}
	if len(v.Calls) != 2 {
		t.Fatalf("%d calls, want 2", len(v.Calls))
	}
	c1, c2 := v.Calls[0], v.Calls[1]
	if c1.API != api.ShapeChatCompletions || c1.Stream || c1.ModelVersion != 3 || c1.Context != 0 || len(c1.New) != 2 ||
		c1.New[0].Role != "system" || c1.New[1].Role != "user" || !strings.Contains(c1.New[1].Text, "Paris") {
		t.Errorf("call 1 %+v", c1)
	}
	if !slices.Equal(c1.Tools, []string{"get_weather"}) {
		t.Errorf("call 1 tools %v", c1.Tools)
	}
	if c1.Reply == nil || len(c1.Reply.ToolCalls) != 1 || c1.Reply.ToolCalls[0].Name != "get_weather" ||
		compact(c1.Reply.ToolCalls[0].Arguments) != `{"city":"Paris"}` || c1.Reply.ToolCalls[0].ID == "" {
		t.Fatalf("call 1 reply %+v", c1.Reply)
	}
	if !c2.Stream || !c2.Continued || c2.Rewritten || c2.Context != 3 || len(c2.New) != 1 {
		t.Fatalf("call 2 %+v", c2)
	}
	res := c2.New[0]
	if res.Role != "tool" || res.Text != "sunny, 24°C" || res.ToolCallID != c1.Reply.ToolCalls[0].ID || res.Name != "get_weather" {
		t.Errorf("tool result %+v", res)
	}
	if c2.Reply == nil || c2.Reply.Text != "It is sunny in Paris, 24°C." || c2.FinishReason != "stop" {
		t.Errorf("streamed reply %+v finish %q", c2.Reply, c2.FinishReason)
	}
	var types []string
	for _, ev := range v.Events {
		types = append(types, ev.Type)
	}
	if !slices.Equal(types, []string{"reward", "log"}) || !strings.Contains(v.Events[0].Data, `"value":1`) {
		t.Errorf("events %+v", v.Events)
	}
	// Unknown rollout / attempt.
	if st, _ := e.get(t, "/api/dashboard/rollouts/nope", admin, nil); st != 404 {
		t.Errorf("unknown rollout: %d", st)
	}
	if st, _ := e.get(t, "/api/dashboard/rollouts/weather-1?attempt=nope", admin, nil); st != 404 {
		t.Errorf("unknown attempt: %d", st)
	}
}

func compact(s string) string {
	var m any
	if json.Unmarshal([]byte(s), &m) != nil {
		return s
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// TestTokensView: the per-token view is the samples package's merge of
// the attempt's calls: one merged sample for a continued conversation,
// two with the reason when the harness rewrote its history.
func TestTokensView(t *testing.T) {
	e := newEnv(t, admin)
	e.weatherRollout(t, "weather-1", 1, "Oslo", 0.5)
	var v dashboard.TokensView
	if st, body := e.get(t, "/api/dashboard/rollouts/weather-1/tokens", admin, &v); st != 200 {
		t.Fatalf("%d %s", st, body)
	}
	if !v.Decoded || len(v.Samples) != 1 || len(v.Excluded) != 0 {
		t.Fatalf("decoded %v, %d samples, excluded %+v", v.Decoded, len(v.Samples), v.Excluded)
	}
	s := v.Samples[0]
	if s.Split.Reason != "first" || len(s.Calls) != 2 || len(s.IDs) != len(s.Mask) || len(s.IDs) != len(s.Logprobs) || len(s.IDs) != len(s.Pieces) {
		t.Fatalf("sample %+v", s.Split)
	}
	var evs []store.Event
	evs, _ = e.st.ListEvents(testCtx(t), store.EventFilter{RolloutID: "weather-1", Types: []string{store.EventModelRequest}})
	var last api.ModelCall
	json.Unmarshal(evs[len(evs)-1].Data, &last)
	if !slices.Equal(s.IDs, append(slices.Clone(last.PromptIDs), last.ResponseIDs...)) {
		t.Errorf("merged sample is not the last call's prompt+response")
	}
	trained := 0
	for _, c := range s.Calls {
		for i := c.PromptStart; i < c.ResponseEnd; i++ {
			want := int8(0)
			if i >= c.ResponseStart {
				want = 1
				trained++
			}
			if s.Mask[i] != want {
				t.Fatalf("call %s: token %d mask %d, want %d", c.CallID, i, s.Mask[i], want)
			}
		}
	}
	if trained == 0 || s.Calls[1].PromptStart != s.Calls[0].ResponseEnd || s.Calls[1].ResponseEnd != len(s.IDs) {
		t.Errorf("call spans %+v for %d ids", s.Calls, len(s.IDs))
	}
	text := strings.Join(s.Pieces, "")
	if !strings.Contains(text, "get_weather") || !strings.Contains(text, "sunny in Oslo") {
		t.Errorf("decoded pieces: %q", text)
	}

	// A harness that rewrites its history: the second call starts anew.
	cl := e.claim(t, store.NewRollout{ID: "rewrite"}, "worker-2")
	e.eng.Push(chat.Message{Role: chat.RoleAssistant, Content: "First answer."}, chat.Message{Role: chat.RoleAssistant, Content: "Second answer."})
	e.rawPost(t, cl, "/v1/chat/completions", `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"One?"}]}`, nil)
	e.rawPost(t, cl, "/v1/chat/completions", `{"model":"m","messages":[{"role":"system","content":"Be VERY brief."},{"role":"user","content":"One?"},{"role":"assistant","content":"First answer."},{"role":"user","content":"Two?"}]}`, nil)
	if st, body := e.get(t, "/api/dashboard/rollouts/rewrite/tokens", admin, &v); st != 200 {
		t.Fatalf("%d %s", st, body)
	}
	if len(v.Samples) != 2 || v.Samples[1].Split.Reason == "first" || v.Samples[1].Split.Reason == "" || v.Samples[1].Split.At < 0 {
		t.Fatalf("rewritten history: %d samples, split %+v", len(v.Samples), v.Samples[len(v.Samples)-1].Split)
	}
	var rv dashboard.RolloutView
	e.get(t, "/api/dashboard/rollouts/rewrite", admin, &rv)
	if len(rv.Calls) != 2 || !rv.Calls[1].Rewritten || len(rv.Calls[1].New) != 4 || rv.Calls[1].Continued {
		t.Errorf("conversation of a rewritten history: %+v", rv.Calls[1])
	}
}

// TestConversationShapes drives the Responses, Anthropic Messages and
// Gemini routes with a tool call and its result: the conversation view
// reads each.
func TestConversationShapes(t *testing.T) {
	e := newEnv(t, admin)
	tc := chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{Name: "lookup", Arguments: `{"q": "agl"}`}}}

	cl := e.claim(t, store.NewRollout{ID: "responses"}, "w")
	e.eng.Push(tc, chat.Message{Role: chat.RoleAssistant, Content: "Found it."})
	tools := `[{"type":"function","name":"lookup","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}]`
	out := e.rawPost(t, cl, "/v1/responses", `{"model":"m","instructions":"Use tools.","input":"Find agl.","tools":`+tools+`}`, nil)
	var r1 struct {
		Output []json.RawMessage `json:"output"`
	}
	json.Unmarshal([]byte(out), &r1)
	var fc struct {
		CallID string `json:"call_id"`
	}
	json.Unmarshal(r1.Output[len(r1.Output)-1], &fc)
	in := `[{"role":"user","content":"Find agl."}`
	for _, o := range r1.Output {
		in += "," + string(o)
	}
	in += `,{"type":"function_call_output","call_id":"` + fc.CallID + `","output":"agl is an RL trainer"}]`
	e.rawPost(t, cl, "/v1/responses", `{"model":"m","instructions":"Use tools.","input":`+in+`,"tools":`+tools+`}`, nil)

	am := e.claim(t, store.NewRollout{ID: "messages"}, "w")
	e.eng.Push(tc, chat.Message{Role: chat.RoleAssistant, Content: "Found it."})
	ah := map[string]string{"anthropic-version": "2023-06-01"}
	atools := `[{"name":"lookup","input_schema":{"type":"object","properties":{"q":{"type":"string"}}}}]`
	out = e.rawPost(t, am, "/v1/messages", `{"model":"m","max_tokens":100,"system":"Use tools.","messages":[{"role":"user","content":"Find agl."}],"tools":`+atools+`}`, ah)
	var m1 struct {
		Content []struct {
			ID string `json:"id"`
		} `json:"content"`
	}
	json.Unmarshal([]byte(out), &m1)
	var a1 struct {
		Content json.RawMessage `json:"content"`
	}
	json.Unmarshal([]byte(out), &a1)
	e.rawPost(t, am, "/v1/messages", `{"model":"m","max_tokens":100,"system":"Use tools.","messages":[{"role":"user","content":"Find agl."},{"role":"assistant","content":`+
		string(a1.Content)+`},{"role":"user","content":[{"type":"tool_result","tool_use_id":"`+m1.Content[len(m1.Content)-1].ID+`","content":"agl is an RL trainer"}]}],"tools":`+atools+`}`, ah)

	gm := e.claim(t, store.NewRollout{ID: "gemini"}, "w")
	e.eng.Push(tc, chat.Message{Role: chat.RoleAssistant, Content: "Found it."})
	gh := map[string]string{"x-goog-api-key": gm.Key}
	gtools := `[{"functionDeclarations":[{"name":"lookup","parametersJsonSchema":{"type":"object","properties":{"q":{"type":"string"}}}}]}]`
	gsys := `{"parts":[{"text":"Use tools."}]}`
	out = e.rawPost(t, gm, "/v1beta/models/m:generateContent", `{"systemInstruction":`+gsys+`,"contents":[{"role":"user","parts":[{"text":"Find agl."}]}],"tools":`+gtools+`}`, gh)
	var g1 struct {
		Candidates []struct {
			Content struct {
				Parts []struct {
					FunctionCall struct {
						ID string `json:"id"`
					} `json:"functionCall"`
				} `json:"parts"`
			} `json:"content"`
		} `json:"candidates"`
	}
	json.Unmarshal([]byte(out), &g1)
	gparts := g1.Candidates[0].Content.Parts
	gcall := gparts[len(gparts)-1].FunctionCall.ID
	e.rawPost(t, gm, "/v1beta/models/m:streamGenerateContent?alt=sse", `{"systemInstruction":`+gsys+`,"contents":[{"role":"user","parts":[{"text":"Find agl."}]},`+
		`{"role":"model","parts":[{"functionCall":{"id":"`+gcall+`","name":"lookup","args":{"q":"agl"}}}]},`+
		`{"role":"user","parts":[{"functionResponse":{"id":"`+gcall+`","name":"lookup","response":{"output":"agl is an RL trainer"}}}]}],"tools":`+gtools+`}`, gh)

	for _, id := range []string{"responses", "messages", "gemini"} {
		t.Run(id, func(t *testing.T) {
			var v dashboard.RolloutView
			if st, body := e.get(t, "/api/dashboard/rollouts/"+id, admin, &v); st != 200 {
				t.Fatalf("%d %s", st, body)
			}
			if len(v.Calls) != 2 {
				t.Fatalf("%d calls", len(v.Calls))
			}
			c1, c2 := v.Calls[0], v.Calls[1]
			if c1.Error != "" || c2.Error != "" {
				t.Fatalf("errors %q %q", c1.Error, c2.Error)
			}
			if len(c1.New) != 2 || c1.New[0].Role != "system" || c1.New[0].Text != "Use tools." || c1.New[1].Text != "Find agl." || !slices.Equal(c1.Tools, []string{"lookup"}) {
				t.Errorf("call 1 messages %+v tools %v", c1.New, c1.Tools)
			}
			if c1.Reply == nil || len(c1.Reply.ToolCalls) != 1 || c1.Reply.ToolCalls[0].Name != "lookup" || compact(c1.Reply.ToolCalls[0].Arguments) != `{"q":"agl"}` {
				t.Fatalf("call 1 reply %+v", c1.Reply)
			}
			if c2.Rewritten || c2.Context != 3 || len(c2.New) != 1 || c2.New[0].Role != "tool" || c2.New[0].Text != "agl is an RL trainer" || c2.New[0].Name != "lookup" {
				t.Errorf("call 2 context %d rewritten %v new %+v", c2.Context, c2.Rewritten, c2.New)
			}
			if c2.Reply == nil || c2.Reply.Text != "Found it." {
				t.Errorf("call 2 reply %+v", c2.Reply)
			}
		})
	}
}

func TestTrainAndStateViews(t *testing.T) {
	e := newEnv(t, admin)
	ctx := testCtx(t)
	t0 := time.Now().Add(-time.Minute)
	for i, st := range []store.TrainStep{
		{Run: "old", Mode: store.ModeTrain, Step: 1, Time: t0, Metrics: json.RawMessage(`{"reward_mean":0.1}`)},
		{Run: "new", Mode: store.ModeTrain, Step: 1, Time: t0.Add(time.Second), Metrics: json.RawMessage(`{"reward_mean":0.2,"tokens_per_second":900}`)},
		{Run: "new", Mode: store.ModeVal, Step: 1, Time: t0.Add(2 * time.Second), Metrics: json.RawMessage(`{"reward_mean":0.3}`)},
	} {
		if err := e.st.PutTrainStep(ctx, st); err != nil {
			t.Fatal(i, err)
		}
	}
	if _, err := e.st.RegisterModel(ctx, store.Model{Name: "agl-test", Weights: "/w/1"}); err != nil {
		t.Fatal(err)
	}
	var tv dashboard.TrainView
	e.get(t, "/api/dashboard/train", admin, &tv)
	if !slices.Equal(tv.Runs, []string{"new", "old"}) || tv.Run != "new" || len(tv.Steps) != 2 || len(tv.Models) != 1 {
		t.Fatalf("train view %+v", tv)
	}
	e.get(t, "/api/dashboard/train?run=old", admin, &tv)
	if tv.Run != "old" || len(tv.Steps) != 1 {
		t.Errorf("run old: %+v", tv)
	}

	e.claim(t, store.NewRollout{ID: "busy"}, "ctl-7")
	e.px.Pause()
	var sv dashboard.StateView
	e.get(t, "/api/dashboard/state", admin, &sv)
	if !sv.Gateway.LLM || !sv.Gateway.Paused || sv.Gateway.Counts[store.RolloutRunning] != 1 || sv.Gateway.Version != "test" {
		t.Errorf("gateway state %+v", sv.Gateway)
	}
	var wv dashboard.WorkersView
	e.get(t, "/api/dashboard/workers", admin, &wv)
	if len(wv.Workers) != 1 || wv.Workers[0].ID != "ctl-7" || wv.Workers[0].Running != 1 || wv.Window != "10m0s" {
		t.Errorf("workers %+v", wv)
	}
	if st, body := e.get(t, "/api/dashboard/workers?window=1s", admin, &wv); st != 200 || len(wv.Workers) != 1 {
		t.Errorf("workers in the last second (the running attempt counts): %d %s", st, body)
	}
	if st, _ := e.get(t, "/api/dashboard/workers?window=forever", admin, nil); st != 400 {
		t.Errorf("bad window: %d", st)
	}
	e.px.Resume()
	e.get(t, "/api/dashboard/state", admin, &sv)
	if sv.Gateway.Paused {
		t.Errorf("still paused after resume")
	}
}

// TestNoKeysInViews: no dashboard view or page shows a scoped key, a key
// hash or the admin key.
func TestNoKeysInViews(t *testing.T) {
	e := newEnv(t, admin)
	e.weatherRollout(t, "weather-1", 1, "Rome", 1)
	e.claim(t, store.NewRollout{ID: "running"}, "w9")
	fill(t, e)
	paths := []string{"/", "/login", "/assets/app.js", "/api/dashboard/rollouts?limit=200", "/api/dashboard/state", "/api/dashboard/workers", "/api/dashboard/train"}
	rs, _, _ := e.st.ListRollouts(testCtx(t), store.RolloutFilter{Limit: 1000})
	for _, r := range rs {
		paths = append(paths, "/api/dashboard/rollouts/"+r.ID, "/api/dashboard/rollouts/"+r.ID+"/tokens")
	}
	if len(e.keys) < 30 {
		t.Fatalf("only %d keys handed out", len(e.keys))
	}
	for _, p := range paths {
		st, body := e.get(t, p, admin, nil)
		if st != 200 {
			t.Fatalf("GET %s: %d %s", p, st, body)
		}
		for _, k := range e.keys {
			if strings.Contains(body, k) {
				t.Fatalf("GET %s shows a scoped key", p)
			}
		}
		for _, bad := range []string{store.KeyPrefix, "key_hash", admin} {
			if strings.Contains(body, bad) {
				t.Errorf("GET %s contains %q", p, bad)
			}
		}
	}
}

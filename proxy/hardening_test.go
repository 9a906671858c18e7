package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/gateway"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
)

const gwAdmin = "gw-admin-key"

// behindGateway serves e's proxy behind a real gateway on loopback (its
// limits, body cap and /api routes included) and returns its base URL.
func behindGateway(t *testing.T, e *env, opt gateway.Options) string {
	t.Helper()
	opt.Store, opt.AdminKey, opt.LLM = e.st, gwAdmin, e.p
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gateway.New(opt).Serve(ctx, ln, 5*time.Second, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + ln.Addr().String()
}

// unsized hides a body's length, so the client sends it chunked.
type unsized struct{ io.Reader }

// TestSmallerRefusals: each of issue 14's smaller items on the LLM routes,
// through the gateway: a clear 400/401/408/413 in the caller's API shape,
// nothing recorded.
func TestSmallerRefusals(t *testing.T) {
	e := newEnv(t, proxy.Config{}, nil)
	gw := behindGateway(t, e, gateway.Options{MaxBodyBytes: 4096, Limits: gateway.Limits{ReadBodyTimeout: 300 * time.Millisecond}})
	cl := e.claim(t, store.ModeTrain)
	other := e.claim(t, store.ModeTrain)
	root := gw + "/r/" + cl.Rollout.ID + "/" + cl.Attempt.ID + "/v1/"
	ak := map[string]string{"x-api-key": cl.Key, "anthropic-version": "2023-06-01"}
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`
	cases := []struct {
		name, route string
		hdr         map[string]string
		body        string
		chunked     bool
		status      int
		anthropic   bool
		mention     string
	}{
		{"chat negative max_tokens", "chat/completions", bearer(cl.Key), `{"model":"m","max_tokens":-1,"messages":[{"role":"user","content":"hi"}]}`, false, 400, false, "max_tokens"},
		{"chat negative max_completion_tokens", "chat/completions", bearer(cl.Key), `{"model":"m","max_completion_tokens":-5,"messages":[{"role":"user","content":"hi"}]}`, false, 400, false, "-5"},
		{"completions negative max_tokens", "completions", bearer(cl.Key), `{"model":"m","max_tokens":-1,"prompt":"hi"}`, false, 400, false, "max_tokens"},
		{"responses negative max_output_tokens", "responses", bearer(cl.Key), `{"model":"m","max_output_tokens":-1,"input":"hi"}`, false, 400, false, "max_output_tokens"},
		{"messages negative max_tokens", "messages", ak, `{"model":"m","max_tokens":-1,"messages":[{"role":"user","content":"hi"}]}`, false, 400, true, "max_tokens"},
		{"completions prompt id out of vocabulary", "completions", bearer(cl.Key), `{"model":"m","max_tokens":2,"prompt":[1,99999999]}`, false, 400, false, "vocabulary"},
		{"completions negative prompt id", "completions", bearer(cl.Key), `{"model":"m","max_tokens":2,"prompt":[-3]}`, false, 400, false, "negative"},
		{"chat content not UTF-8", "chat/completions", bearer(cl.Key), "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", false, 400, false, "UTF-8"},
		{"messages content not UTF-8", "messages", ak, "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\"}]}", false, 400, true, "UTF-8"},
		{"chat oversized chunked body", "chat/completions", bearer(cl.Key), big, true, 413, false, "limit"},
		{"messages oversized chunked body", "messages", ak, big, true, 413, true, "limit"},
		{"keys differ", "chat/completions", map[string]string{"Authorization": "Bearer " + cl.Key, "x-api-key": other.Key}, goodChat, false, 401, false, "different keys"},
		{"messages keys differ", "messages", map[string]string{"Authorization": "Bearer " + other.Key, "x-api-key": cl.Key}, goodMessages, false, 401, true, "different keys"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader = strings.NewReader(tc.body)
			if tc.chunked {
				body = unsized{body}
			}
			req, _ := http.NewRequestWithContext(testCtx(t), "POST", root+tc.route, body)
			req.Header.Set("Content-Type", "application/json")
			for k, v := range tc.hdr {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, raw)
			}
			var b struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(raw, &b); err != nil || b.Error.Message == "" || tc.anthropic != (b.Type == "error") {
				t.Fatalf("not an error in the route's shape: %s", raw)
			}
			if !strings.Contains(b.Error.Message, tc.mention) {
				t.Errorf("message %q does not mention %q", b.Error.Message, tc.mention)
			}
		})
	}
	t.Run("declared body never sent", func(t *testing.T) {
		conn, err := net.Dial("tcp", strings.TrimPrefix(gw, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(conn, "POST /r/"+cl.Rollout.ID+"/"+cl.Attempt.ID+"/v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+cl.Key+"\r\nContent-Length: 500\r\n\r\n{")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(raw), "in time") {
			t.Fatalf("%d %s", resp.StatusCode, raw)
		}
	})
	if calls := e.calls(t, cl); len(calls) != 0 {
		t.Fatalf("%d calls recorded by refused requests", len(calls))
	}
}

// TestIDAlphabetOnEveryRoute: a rollout whose id uses every byte of the
// id alphabet works on every route, LLM routes included; one outside it is
// refused at creation naming the field.
func TestIDAlphabetOnEveryRoute(t *testing.T) {
	e := newEnv(t, proxy.Config{}, nil)
	gw := behindGateway(t, e, gateway.Options{})
	ctx := testCtx(t)
	adm := api.NewClient(gw, gwAdmin)
	id := "AZaz09-._~:x"
	if _, err := adm.CreateRollouts(ctx, []store.NewRollout{{ID: "ro/slash"}}); err == nil || !strings.Contains(err.Error(), "rollout id") {
		t.Fatalf("id with a slash: %v, want a 400 naming the rollout id", err)
	}
	if _, err := adm.CreateRollouts(ctx, []store.NewRollout{{ID: id, GroupID: id, Task: json.RawMessage(`{"q":1}`)}}); err != nil {
		t.Fatal(err)
	}
	cl, ok, err := adm.Claim(ctx, store.ClaimRequest{WorkerID: "w"})
	if err != nil || !ok || cl.Rollout.ID != id {
		t.Fatalf("claim: %+v %v %v", cl.Rollout.ID, ok, err)
	}
	base := gw + "/r/" + id + "/" + cl.Attempt.ID
	e.eng.Push(text("hello"))
	if st, _, body := post(t, "POST", base+"/v1/chat/completions", bearer(cl.Key), goodChat); st != 200 {
		t.Fatalf("chat: %d %s", st, body)
	}
	e.eng.Push(text("hi"))
	if st, _, body := post(t, "POST", base+"/v1/messages", map[string]string{"x-api-key": cl.Key}, goodMessages); st != 200 {
		t.Fatalf("messages: %d %s", st, body)
	}
	if st, _, body := post(t, "GET", base+"/v1/models", bearer(cl.Key), ""); st != 200 {
		t.Fatalf("models: %d %s", st, body)
	}
	if st, _, body := post(t, "POST", base+"/events", bearer(cl.Key), `{"events":[{"type":"note","data":1}]}`); st != 200 {
		t.Fatalf("/r/ events: %d %s", st, body)
	}
	k := api.NewClient(gw, cl.Key)
	if _, err := k.Heartbeat(ctx, id, cl.Attempt.ID); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	if _, err := k.AppendEvents(ctx, id, cl.Attempt.ID, []store.NewEvent{{Type: "log", Data: json.RawMessage(`"x"`)}}); err != nil {
		t.Fatalf("/api events: %v", err)
	}
	ro, err := adm.GetRollout(ctx, id)
	if err != nil || ro.ID != id || ro.GroupID != id {
		t.Fatalf("get: %+v %v", ro, err)
	}
	evs, err := adm.ListEvents(ctx, store.EventFilter{RolloutID: id})
	if err != nil || len(evs) != 4 {
		t.Fatalf("events: %d %v", len(evs), err)
	}
	if _, err := adm.CancelRollout(ctx, id, "done"); err != nil {
		t.Fatalf("cancel: %v", err)
	}
}

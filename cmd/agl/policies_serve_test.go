package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/samples"
	"github.com/aglrl/agl/store"
)

// TestGatewayExportPolicies runs the built `agl gateway` on a config with
// a `policies:` section (the writer trained, the checker frozen, each on
// an embedded model of its own, paths relative to the config file): each
// agent's call is answered by its own policy's engine. `agl export` on the
// same config then trains what agl train would: the writer's calls only,
// the frozen checker's masked; it refuses --policy of a frozen policy and
// --train-agent beside policies.
func TestGatewayExportPolicies(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the agl binary")
	}
	bin, err := buildAgl()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, m := range []string{"wmodel", "cmodel"} {
		if _, stderr, err := aglRun(bin, "model", "init", "--preset", "tiny", "--out", filepath.Join(dir, m)); err != nil {
			t.Fatalf("model init: %v\n%s", err, stderr)
		}
	}
	cfg := filepath.Join(dir, "agl.yaml")
	os.WriteFile(cfg, []byte(`policies:
  w: {kind: trained, model_dir: wmodel, agents: [writer]}
  c: {kind: frozen, model_dir: cmodel, agents: [checker]}
proxy:
  agents: {checker-model: checker}
`), 0o644)
	dataDir, addr := filepath.Join(dir, "run"), freeAddr(t)
	gw := startGateway(t, bin, dataDir, addr, "--config", cfg)
	defer func() { gw.Process.Kill(); gw.Wait() }()

	cl := api.NewClient("http://"+addr, "crash-key")
	if _, err := cl.CreateRollouts(ctx, []store.NewRollout{{ID: "r1", Task: json.RawMessage(`{}`), Mode: store.ModeTrain}}); err != nil {
		t.Fatal(err)
	}
	claim, ok, err := cl.Claim(ctx, store.ClaimRequest{WorkerID: "t", Mode: store.ModeTrain})
	if err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	base := "http://" + addr + "/r/" + claim.Rollout.ID + "/" + claim.Attempt.ID
	post := func(path, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+claim.Key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	chat := `{"model":"%s","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name, path, model string
		status            int
		policy            string
	}{
		{"writer by path", "/agents/writer/v1/chat/completions", "agl", 200, "w"},
		{"checker by path", "/agents/checker/v1/chat/completions", "agl", 200, "c"},
		{"checker by model name", "/v1/chat/completions", "checker-model", 200, "c"},
		{"agent of no policy", "/agents/judge/v1/chat/completions", "agl", 400, ""},
	} {
		code, out := post(tc.path, fmt.Sprintf(chat, tc.model))
		if code != tc.status {
			t.Errorf("%s: status %d, want %d (%v)", tc.name, code, tc.status, out)
			continue
		}
		if tc.policy != "" && out["model"] != tc.policy {
			t.Errorf("%s: answered by model %v, want policy %s", tc.name, out["model"], tc.policy)
		}
	}
	if code, out := post("/events", `{"type":"reward","data":{"value":1}}`); code >= 300 {
		t.Fatalf("reward: %d %v", code, out)
	}
	if _, err := cl.Complete(ctx, claim.Rollout.ID, claim.Attempt.ID, store.AttemptSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	evs, err := cl.ListEvents(ctx, store.EventFilter{RolloutID: "r1", Types: []string{store.EventModelRequest}})
	if err != nil || len(evs) != 3 {
		t.Fatalf("%d model calls recorded (%v), want 3", len(evs), err)
	}
	writerTokens := 0
	for _, ev := range evs {
		var mc api.ModelCall
		json.Unmarshal(ev.Data, &mc)
		if mc.Agent == "writer" {
			writerTokens += len(mc.ResponseIDs)
		}
	}

	// agl export beside the live gateway, on the same config.
	out := filepath.Join(dir, "samples.jsonl")
	stdout, stderr, err := aglRun(bin, "export", "--config", cfg, "--data-dir", dataDir, "--out", out)
	if err != nil {
		t.Fatalf("export: %v\n%s", err, stderr)
	}
	var sum struct {
		Stats    *samples.Stats           `json:"stats"`
		Policies map[string]samples.Stats `json:"policies"`
	}
	if err := json.Unmarshal([]byte(stdout), &sum); err != nil {
		t.Fatalf("export summary %q: %v", stdout, err)
	}
	if sum.Stats != nil || len(sum.Policies) != 1 || sum.Policies["w"].TrainedTokens != writerTokens || writerTokens == 0 {
		t.Errorf("export summary %s: want policy w only, with the writer's %d tokens trained", stdout, writerTokens)
	}
	f, _ := os.Open(out)
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); n++ {
		var s samples.Sample
		json.Unmarshal(sc.Bytes(), &s)
		if s.Agent != "writer" {
			t.Errorf("exported a sample of agent %q: only the trained writer's calls train", s.Agent)
		}
	}
	if n != 1 {
		t.Errorf("%d samples exported, want the writer's 1", n)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--policy", "c"}, "--policy c: a frozen policy, not trained"},
		{[]string{"--policy", "x"}, "--policy x: no such policy"},
		{[]string{"--train-agent", "writer"}, "--train-agent: with policies"},
	} {
		_, stderr, err := aglRun(bin, append([]string{"export", "--config", cfg, "--data-dir", dataDir, "--out", out}, tc.args...)...)
		if err == nil || !strings.Contains(stderr, tc.want) {
			t.Errorf("export %q: %v, stderr %q, want %q", tc.args, err, stderr, tc.want)
		}
	}
}

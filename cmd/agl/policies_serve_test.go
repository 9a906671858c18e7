package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/samples"
	"github.com/aglrl/agl/store"
)

// policyModels builds agl and makes two tiny models in a temp dir, wmodel
// and cmodel, for configs with a trained writer and a frozen checker.
func policyModels(t *testing.T) (bin, dir string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the agl binary")
	}
	bin, err := buildAgl()
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	for _, m := range []string{"wmodel", "cmodel"} {
		if _, stderr, err := aglRun(bin, "model", "init", "--preset", "tiny", "--out", filepath.Join(dir, m)); err != nil {
			t.Fatalf("model init: %v\n%s", err, stderr)
		}
	}
	return bin, dir
}

// TestGatewayExportPolicies runs the built `agl gateway` on a config with
// a `policies:` section (the writer trained, the checker frozen, each on
// an embedded model of its own, paths relative to the config file): each
// agent's call is answered by its own policy's engine. `agl export` on the
// same config then trains what agl train would: the writer's calls only,
// the frozen checker's masked; it refuses --policy of a frozen policy and
// --train-agent beside policies.
func TestGatewayExportPolicies(t *testing.T) {
	bin, dir := policyModels(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := filepath.Join(dir, "agl.yaml")
	os.WriteFile(cfg, []byte(`policies:
  w: {kind: trained, model_dir: wmodel, agents: [writer]}
  c: {kind: frozen, model_dir: cmodel, agents: [checker]}
proxy:
  agents: {checker-model: checker}
`), 0o644)
	dataDir, addr := filepath.Join(dir, "run"), testutil.FreeAddr(t)
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
	if err != nil {
		t.Fatal(err)
	}
	// Three answered calls, and the refused one's error record (which
	// the export below must not train on).
	writerTokens, answered, refused := 0, 0, 0
	for _, ev := range evs {
		var mc api.ModelCall
		json.Unmarshal(ev.Data, &mc)
		if mc.Status == api.CallError {
			refused++
			if mc.HTTPStatus != http.StatusBadRequest {
				t.Errorf("error record of HTTP status %d, want 400", mc.HTTPStatus)
			}
			continue
		}
		answered++
		if mc.Agent == "writer" {
			writerTokens += len(mc.ResponseIDs)
		}
	}
	if answered != 3 || refused != 1 {
		t.Fatalf("%d answered and %d refused model calls recorded, want 3 and 1", answered, refused)
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

// TestGatewayServesCheckpoint: after agl train, `agl gateway` on the same
// config serves a trained policy on the run's checkpoint (the data dir's
// checkpoint/policies/NAME, at the version the run reached), a frozen one
// on its model_dir; --warm-start serves the trained one on its model_dir
// at version 1. The checkpoint here is a short SFT of the warm start that
// makes its greedy reply "yes".
func TestGatewayServesCheckpoint(t *testing.T) {
	bin, dir := policyModels(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	data := filepath.Join(dir, "sft.jsonl")
	os.WriteFile(data, []byte(`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yes"}]}`+"\n"), 0o644)
	dataDir := filepath.Join(dir, "run")
	wckpt := filepath.Join(dataDir, "checkpoint", "policies", "w")
	if _, stderr, err := aglRun(bin, "sft", "--model", filepath.Join(dir, "wmodel"), "--data", data, "--out", wckpt,
		"--steps", "40", "--batch-size", "1", "--lr", "0.01"); err != nil {
		t.Fatalf("sft: %v\n%s", err, stderr)
	}
	os.WriteFile(filepath.Join(dataDir, "checkpoint", "state.json"), []byte(`{"step":3,"version":4,"cursor":9,"versions":{"w":4},"seed":1}`), 0o644)
	cfg := filepath.Join(dir, "agl.yaml")
	os.WriteFile(cfg, []byte(`data_dir: run
policies:
  w: {kind: trained, model_dir: wmodel, agents: [writer]}
  c: {kind: frozen, model_dir: cmodel, agents: [checker]}
`), 0o644)

	type served struct {
		version int64
		reply   string
	}
	call := func(args ...string) map[string]served {
		addr := testutil.FreeAddr(t)
		gw := startGateway(t, bin, dataDir, addr, append([]string{"--config", cfg}, args...)...)
		defer func() { gw.Process.Kill(); gw.Wait() }()
		cl := api.NewClient("http://"+addr, "crash-key")
		id := fmt.Sprintf("r%d", time.Now().UnixNano())
		if _, err := cl.CreateRollouts(ctx, []store.NewRollout{{ID: id, Task: json.RawMessage(`{}`), Mode: store.ModeVal}}); err != nil {
			t.Fatal(err)
		}
		claim, ok, err := cl.Claim(ctx, store.ClaimRequest{WorkerID: "t", Mode: store.ModeVal})
		if err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		out := map[string]served{}
		for _, agent := range []string{"writer", "checker"} {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/r/"+id+"/"+claim.Attempt.ID+"/agents/"+agent+"/v1/chat/completions",
				strings.NewReader(`{"model":"agl","max_tokens":3,"temperature":0,"messages":[{"role":"user","content":"hi"}]}`))
			req.Header.Set("Authorization", "Bearer "+claim.Key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body struct {
				Choices []struct{ Message struct{ Content string } }
			}
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || len(body.Choices) != 1 {
				t.Fatalf("%s: status %d, %v", agent, resp.StatusCode, err)
			}
			out[agent] = served{reply: body.Choices[0].Message.Content}
		}
		evs, err := cl.ListEvents(ctx, store.EventFilter{RolloutID: id, Types: []string{store.EventModelRequest}})
		if err != nil || len(evs) != 2 {
			t.Fatalf("%d model calls recorded (%v), want 2", len(evs), err)
		}
		for _, ev := range evs {
			var mc api.ModelCall
			json.Unmarshal(ev.Data, &mc)
			s := out[mc.Agent]
			s.version = mc.ModelVersion
			out[mc.Agent] = s
		}
		return out
	}

	ckpt := call()
	if w := ckpt["writer"]; w.version != 4 || w.reply != "yes" {
		t.Errorf("writer served %+v, want the checkpoint's reply \"yes\" at its version 4", w)
	}
	if c := ckpt["checker"]; c.version != 1 {
		t.Errorf("frozen checker served at version %d, want 1", c.version)
	}
	warm := call("--warm-start")
	if w := warm["writer"]; w.version != 1 || w.reply == "yes" {
		t.Errorf("--warm-start: writer served %+v, want the model_dir's weights at version 1", w)
	}
	if warm["checker"] != ckpt["checker"] {
		t.Errorf("frozen checker: %+v with the checkpoint, %+v with --warm-start: want the same model_dir's", ckpt["checker"], warm["checker"])
	}

	// A damaged checkpoint is refused with a message naming it, not
	// served from the warm start in silence.
	os.WriteFile(filepath.Join(dataDir, "checkpoint", "state.json"), []byte(`{"step":`), 0o644)
	var errb strings.Builder
	gw := exec.CommandContext(ctx, bin, "gateway", "--config", cfg, "--listen", testutil.FreeAddr(t))
	gw.Stderr = &errb
	gw.WaitDelay = time.Second
	done := time.AfterFunc(30*time.Second, func() { gw.Process.Kill() }) // a gateway that started anyway
	err := gw.Run()
	done.Stop()
	stderr := errb.String()
	if err == nil || !strings.Contains(stderr, "checkpoint") || !strings.Contains(stderr, "--warm-start") {
		t.Errorf("gateway on a damaged checkpoint: %v, stderr %q: want a refusal naming the checkpoint and --warm-start", err, stderr)
	}
}

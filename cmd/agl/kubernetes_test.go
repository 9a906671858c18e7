package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/aglrl/agl/store"
)

// TestControllerKindErrors: `agl controller` (the built binary) refuses a
// bad kind or kubernetes section with a one-line error naming what was
// wrong, before claiming anything.
func TestControllerKindErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin, err := buildAgl()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, cmd, yaml, want string
	}{
		{"unknown kind", "controller", "controller:\n  kind: nomad\n  command: [true]\n", `controller: kind "nomad": want local or kubernetes`},
		{"kubernetes section with kind local", "controller", "controller:\n  command: [true]\n  kubernetes: {image: x}\n", `controller.kubernetes section but controller.kind is "local"`},
		{"unknown kubernetes field", "controller", "controller:\n  kind: kubernetes\n  kubernetes: {imagee: x}\n", "field imagee not found"},
		{"no image", "controller", "controller:\n  kind: kubernetes\n  kubernetes: {namespace: agl}\n", "controller.kubernetes: set image"},
		{"no cluster", "controller", "controller:\n  kind: kubernetes\n  kubernetes: {image: x, kubeconfig: /nonexistent/kubeconfig}\n", "controller.kubernetes: no cluster config from /nonexistent/kubeconfig"},
		{"bad template file", "controller", "controller:\n  kind: kubernetes\n  kubernetes: {job_template_file: missing.tmpl}\n", "controller.kubernetes: job_template_file: open "},
		{"train refuses kind kubernetes", "train", "engine: {model_dir: m}\ncontroller:\n  kind: kubernetes\n  kubernetes: {image: x}\n", "train: controller.kind kubernetes: agl train runs the local controller"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "agl.yaml")
			if err := os.WriteFile(cfg, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{tc.cmd, "--config", cfg}
			if tc.cmd == "train" {
				args = []string{"train", cfg}
			}
			_, stderr, err := aglRun(bin, args...)
			if err == nil || !strings.Contains(stderr, tc.want) {
				t.Fatalf("err %v, stderr %q, want %q", err, stderr, tc.want)
			}
		})
	}
}

// apiServer is the part of a Kubernetes API server `agl controller` uses
// (jobs create/get/delete, pods list, pods/log get), in its JSON wire
// format on loopback (no real one can run here; TestRealAPIServer in
// controller/kubernetes runs one when envtest binaries are given). It also
// plays the Job controller and the kubelet: a created Job has at once a
// pod whose harness exited 0 with the task's reward as its termination
// message, and whose log shows the scoped key it got.
type apiServer struct {
	t     *testing.T
	token string
	mu    sync.Mutex
	jobs  map[string]*batchv1.Job
	pods  map[string]*corev1.Pod
}

func (a *apiServer) status(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure", Code: int32(code), Reason: metav1.StatusReason(reason), Message: msg})
}

func (a *apiServer) reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func (a *apiServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /apis/batch/v1/namespaces/{ns}/jobs", func(w http.ResponseWriter, r *http.Request) {
		// client-go sends protobuf (or JSON); answers are JSON, which it accepts too.
		body, _ := io.ReadAll(r.Body)
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
		jp, ok := obj.(*batchv1.Job)
		if err != nil || !ok {
			a.status(w, 400, "BadRequest", fmt.Sprintf("want a Job (%s): %v", r.Header.Get("Content-Type"), err))
			return
		}
		j := *jp
		if j.Namespace != r.PathValue("ns") {
			a.status(w, 400, "BadRequest", "namespace mismatch")
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.jobs[j.Name] != nil {
			a.status(w, 409, "AlreadyExists", "jobs.batch \""+j.Name+"\" already exists")
			return
		}
		j.UID, j.CreationTimestamp = types.UID("uid-"+j.Name), metav1.Now()
		now := metav1.Now()
		j.Status = batchv1.JobStatus{Succeeded: 1, StartTime: &now, CompletionTime: &now, Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue}, {Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}
		a.jobs[j.Name] = &j
		c := j.Spec.Template.Spec.Containers[0]
		var task struct{ Reward float64 }
		json.Unmarshal([]byte(envValue(c.Env, "AGL_TASK")), &task)
		pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: j.Name + "-x1", Namespace: j.Namespace, Labels: j.Spec.Template.Labels, CreationTimestamp: now},
			Spec:       j.Spec.Template.Spec,
			Status: corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{Name: c.Name,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", Message: fmt.Sprint(task.Reward)}}}}}}
		a.pods[pod.Name] = pod
		j.TypeMeta = metav1.TypeMeta{Kind: "Job", APIVersion: "batch/v1"}
		a.reply(w, 201, &j)
	})
	mux.HandleFunc("GET /apis/batch/v1/namespaces/{ns}/jobs/{name}", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		j := a.jobs[r.PathValue("name")]
		if j == nil {
			a.status(w, 404, "NotFound", "jobs.batch \""+r.PathValue("name")+"\" not found")
			return
		}
		a.reply(w, 200, j)
	})
	mux.HandleFunc("DELETE /apis/batch/v1/namespaces/{ns}/jobs/{name}", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		delete(a.jobs, r.PathValue("name"))
		a.reply(w, 200, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Success"})
	})
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/pods", func(w http.ResponseWriter, r *http.Request) {
		sel, err := labels.Parse(r.URL.Query().Get("labelSelector"))
		if err != nil {
			a.status(w, 400, "BadRequest", err.Error())
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		l := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}}
		for _, p := range a.pods {
			if p.Namespace == r.PathValue("ns") && sel.Matches(labels.Set(p.Labels)) {
				l.Items = append(l.Items, *p)
			}
		}
		a.reply(w, 200, l)
	})
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/pods/{name}/log", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		p := a.pods[r.PathValue("name")]
		a.mu.Unlock()
		if p == nil || r.URL.Query().Get("container") != p.Spec.Containers[0].Name {
			a.status(w, 404, "NotFound", "no such pod or container")
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "harness starting\nkey %s\nharness done\n", envValue(p.Spec.Containers[0].Env, "OPENAI_API_KEY"))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+a.token {
			a.status(w, 401, "Unauthorized", "Unauthorized")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func envValue(env []corev1.EnvVar, name string) string {
	for _, e := range env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// TestControllerKubernetes: a real `agl gateway` and `agl controller` with
// kind kubernetes, reaching the cluster through a kubeconfig: each rollout
// becomes one Job whose containers carry the env contract (the pods'
// gateway URL, the scoped key), its termination message is the reward and
// its pod log a redacted log event.
func TestControllerKubernetes(t *testing.T) {
	bin, url, c := authorityGateway(t)
	as := &apiServer{t: t, token: "kube-token", jobs: map[string]*batchv1.Job{}, pods: map[string]*corev1.Pod{}}
	ks := httptest.NewTLSServer(as.handler())
	t.Cleanup(ks.Close)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: t, cluster: {server: %s, certificate-authority-data: %s}}]
users: [{name: t, user: {token: kube-token}}]
contexts: [{name: t, context: {cluster: t, user: t}}]
current-context: t
`, ks.URL, base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ks.Certificate().Raw})))), 0o600)
	cfg := filepath.Join(dir, "agl.yaml")
	os.WriteFile(cfg, []byte(`controller:
  kind: kubernetes
  command: [python3, harness.py]
  concurrency: 2
  kubernetes:
    namespace: agl
    image: registry.example/harness:1
    gateway_url: http://agl-gateway.agl:8080
    kubeconfig: `+kubeconfig+`
    poll_interval: 50ms
`), 0o600)
	rs, err := c.CreateRollouts(context.Background(), []store.NewRollout{
		{Task: json.RawMessage(`{"reward":0.25}`), Mode: store.ModeTrain}, {Task: json.RawMessage(`{"reward":1}`), Mode: store.ModeVal}})
	if err != nil {
		t.Fatal(err)
	}
	got := runAglController(t, bin, url, c, []string{rs[0].ID, rs[1].ID}, "--config", cfg)
	for i, r := range got {
		want := []float64{0.25, 1}[i]
		if r.Status != store.RolloutSucceeded || r.Reward == nil || *r.Reward != want {
			t.Fatalf("rollout %s: %s %q reward %v, want succeeded %v", r.ID, r.Status, r.Error, r.Reward, want)
		}
		evs, err := c.ListEvents(context.Background(), store.EventFilter{RolloutID: r.ID, Types: []string{store.EventLog}})
		if err != nil || len(evs) != 1 || !strings.Contains(string(evs[0].Data), "key [REDACTED]") {
			t.Fatalf("log events %v %+v", err, evs)
		}
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	if len(as.jobs) != 2 {
		t.Fatalf("%d jobs, want 2", len(as.jobs))
	}
	for _, j := range as.jobs {
		c := j.Spec.Template.Spec.Containers[0]
		rid := j.Annotations["agl.dev/rollout-id"]
		if !strings.HasPrefix(envValue(c.Env, "OPENAI_BASE_URL"), "http://agl-gateway.agl:8080/r/"+rid+"/") ||
			!strings.HasPrefix(envValue(c.Env, "OPENAI_API_KEY"), store.KeyPrefix) || strings.Join(c.Command, " ") != "python3 harness.py" {
			t.Fatalf("job %s container %+v", j.Name, c)
		}
	}
}

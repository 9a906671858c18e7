package kubernetes_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/aglrl/agl/controller"
	"github.com/aglrl/agl/controller/kubernetes"
	"github.com/aglrl/agl/gateway"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/sqlite"
)

const (
	adminKey = "admin-test-key"
	ns       = "agl-test"
	// podGateway is the gateway as pods reach it (not the loopback one).
	podGateway = "http://agl-gateway.agl:8080"
)

// gw is a real gateway (sqlite store) on loopback.
type gw struct {
	st  store.Store
	srv *httptest.Server
}

func newGateway(t *testing.T) *gw {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "agl.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := gateway.New(gateway.Options{Store: st, AdminKey: adminKey, LLM: proxy.New(proxy.Config{}, st, nil), Logger: quiet})
	g := &gw{st: st, srv: httptest.NewServer(h)}
	t.Cleanup(func() { g.srv.Close(); st.Close() })
	return g
}

func (g *gw) create(t *testing.T, n int, cfg store.RolloutConfig, task string) []string {
	t.Helper()
	var nr []store.NewRollout
	for range n {
		nr = append(nr, store.NewRollout{Task: json.RawMessage(task), Mode: store.ModeTrain, Config: cfg})
	}
	rs, err := g.st.CreateRollouts(context.Background(), nr)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.ID)
	}
	return ids
}

func (g *gw) rollout(t *testing.T, id string) store.Rollout {
	t.Helper()
	r, err := g.st.GetRollout(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (g *gw) waitTerminal(t *testing.T, id string, within time.Duration) store.Rollout {
	t.Helper()
	end := time.Now().Add(within)
	for {
		r := g.rollout(t, id)
		if r.Status.Terminal() {
			return r
		}
		if time.Now().After(end) {
			t.Fatalf("rollout %s still %s after %s", id, r.Status, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (g *gw) events(t *testing.T, rid, typ string) []store.Event {
	t.Helper()
	evs, err := g.st.ListEvents(context.Background(), store.EventFilter{RolloutID: rid, Types: []string{typ}})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// cluster plays the Job controller and the kubelet on a clientset (the fake
// one, or a real API server's, which runs neither): for each new Job of the
// namespace it creates a pod from the template and drives both through the
// task's "case":
//
//	succeed: running, then exit 0 with the task's "reward" as termination message
//	fail:    running, then exit 3, the Job Failed (BackoffLimitExceeded)
//	hang:    running until deleted
//	badimage: the container waits with InvalidImageName
//
// Pod logs (GetLogs, on the fake) hold the pod's scoped key, to be redacted.
type cluster struct {
	cs k8s.Interface
	mu sync.Mutex
	// jobs are the Jobs seen, as created.
	jobs map[string]*batchv1.Job
	seen []string
}

func newCluster(t *testing.T, cs k8s.Interface) *cluster {
	c := &cluster{cs: cs, jobs: map[string]*batchv1.Job{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			c.step(ctx, t)
			time.Sleep(10 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return c
}

// podLogs is the log of the pod of a Job whose harness got key.
func podLogs(key, last string) string {
	return "starting harness\nusing key " + key + "\n" + last + "\n"
}

func (c *cluster) step(ctx context.Context, t *testing.T) {
	l, err := c.cs.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for i := range l.Items {
		j := &l.Items[i]
		c.mu.Lock()
		_, known := c.jobs[j.Name]
		if !known {
			c.jobs[j.Name] = j.DeepCopy()
			c.seen = append(c.seen, j.Name)
		}
		c.mu.Unlock()
		if known {
			continue
		}
		go c.drive(ctx, t, j.DeepCopy())
	}
}

func envOf(ctr corev1.Container, name string) string {
	for _, e := range ctr.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func (c *cluster) drive(ctx context.Context, t *testing.T, j *batchv1.Job) {
	var task struct {
		Case   string  `json:"case"`
		Reward float64 `json:"reward"`
	}
	json.Unmarshal([]byte(envOf(j.Spec.Template.Spec.Containers[0], "AGL_TASK")), &task)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: j.Name + "-pod", Namespace: ns, Labels: j.Spec.Template.Labels, CreationTimestamp: metav1.Now()},
		Spec:       j.Spec.Template.Spec,
	}
	harness := pod.Spec.Containers[0].Name
	pod.Status.Phase = corev1.PodRunning
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: harness, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	if task.Case == "badimage" {
		pod.Status.Phase = corev1.PodPending
		pod.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "InvalidImageName", Message: "couldn't parse image name"}}
	}
	pods := c.cs.CoreV1().Pods(ns)
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return
	}
	start := metav1.Now()
	j.Status.Active = 1
	j.Status.StartTime = &start
	if _, err := c.cs.BatchV1().Jobs(ns).UpdateStatus(ctx, j, metav1.UpdateOptions{}); err != nil {
		return
	}
	if task.Case == "hang" || task.Case == "badimage" {
		return
	}
	time.Sleep(100 * time.Millisecond)
	term := &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}
	cond := batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}
	pod.Status.Phase = corev1.PodSucceeded
	if task.Case == "fail" {
		term = &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error"}
		cond = batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"}
		pod.Status.Phase = corev1.PodFailed
	} else if task.Reward != 0 {
		term.Message = fmt.Sprint(task.Reward)
	}
	pod.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: term}
	if _, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		return
	}
	cur, err := c.cs.BatchV1().Jobs(ns).Get(ctx, j.Name, metav1.GetOptions{})
	if err != nil {
		return
	}
	cur.Status.Active = 0
	if task.Case == "fail" {
		cur.Status.Failed = 1
	} else {
		cur.Status.Succeeded = 1
	}
	// What a real API server's status validation wants: the target
	// condition first, a completion time on success.
	now := metav1.Now()
	if task.Case == "fail" {
		cur.Status.Conditions = append(cur.Status.Conditions, batchv1.JobCondition{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: cond.Reason, Message: cond.Message, LastTransitionTime: now})
	} else {
		cur.Status.Conditions = append(cur.Status.Conditions, batchv1.JobCondition{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: "CompletionsReached", LastTransitionTime: now})
		cur.Status.CompletionTime = &now
	}
	cond.LastTransitionTime = now
	cur.Status.Conditions = append(cur.Status.Conditions, cond)
	c.cs.BatchV1().Jobs(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
}

func (c *cluster) job(name string) *batchv1.Job {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.jobs[name]
}

func (c *cluster) created() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.seen...)
}

// fakeClient is client-go's fake clientset whose pod logs are podLogs of
// the newest pod (the fake's GetLogs action names no pod).
func fakeClient() *fake.Clientset {
	cs := fake.NewClientset()
	cs.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "log" {
			return false, nil, nil
		}
		obj, err := cs.Tracker().List(corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithKind("Pod"), a.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		var key, last string
		for _, p := range obj.(*corev1.PodList).Items {
			key = envOf(p.Spec.Containers[0], "OPENAI_API_KEY")
			last = "harness says " + string(p.Status.Phase)
		}
		return true, &runtime.Unknown{Raw: []byte(podLogs(key, last))}, nil
	})
	return cs
}

type run struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when Serve returned, with err
	err    *error
}

func (r run) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
		if *r.err != nil {
			t.Fatalf("Serve: %v", *r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return")
	}
}

func serve(t *testing.T, g *gw, cfg controller.Config, o kubernetes.Options) run {
	t.Helper()
	b, err := kubernetes.New(o)
	if err != nil {
		t.Fatal(err)
	}
	cfg.GatewayURL, cfg.AdminKey = g.srv.URL, adminKey
	cfg.PollInterval = cmpOr(cfg.PollInterval, 20*time.Millisecond)
	cfg.HeartbeatInterval = cmpOr(cfg.HeartbeatInterval, 50*time.Millisecond)
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	r := run{cancel: cancel, done: make(chan struct{}), err: new(error)}
	go func() { *r.err = controller.Serve(ctx, cfg, b); close(r.done) }()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func opts(cs k8s.Interface) kubernetes.Options {
	return kubernetes.Options{Client: cs, Namespace: ns, GatewayURL: podGateway, PollInterval: 20 * time.Millisecond,
		Values: kubernetes.Values{Image: "registry.example/harness:1"}}
}

// TestLifecycle drives Jobs through create → running → succeeded / failed /
// timeout / unstartable, against a real gateway.
func TestLifecycle(t *testing.T) {
	for _, tc := range []struct {
		name      string
		task      string
		cfg       store.RolloutConfig
		evaluator []string
		status    store.RolloutStatus
		err       string // prefix of the rollout's error
		errHas    string
		reward    *float64
		source    string
		deleted   bool
	}{
		{name: "succeeded, reward file = termination message", task: `{"case":"succeed","reward":0.75}`, status: store.RolloutSucceeded, reward: ptr(0.75), source: "reward_file"},
		{name: "succeeded, evaluator reads the pod log", task: `{"case":"succeed","reward":0.75}`, evaluator: []string{"sh", "-c", `grep -c "harness says Succeeded" "$AGL_LOG_FILE"`}, status: store.RolloutSucceeded, reward: ptr(1), source: "evaluator"},
		{name: "failed", task: `{"case":"fail"}`, status: store.RolloutFailed, err: "kubernetes: job ", errHas: "failed: BackoffLimitExceeded (Job has reached the specified backoff limit); container harness: exit code 3 (Error): harness says Failed"},
		{name: "timeout deletes the job", task: `{"case":"hang"}`, cfg: store.RolloutConfig{TimeoutSeconds: 0.5}, status: store.RolloutFailed, err: "timeout: job ", errHas: "deleted after 500ms", deleted: true},
		{name: "unstartable image fails fast", task: `{"case":"badimage"}`, status: store.RolloutFailed, err: "kubernetes: job ", errHas: "container harness: InvalidImageName: couldn't parse image name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGateway(t)
			cs := fakeClient()
			cl := newCluster(t, cs)
			id := g.create(t, 1, tc.cfg, tc.task)[0]
			r := serve(t, g, controller.Config{Evaluator: tc.evaluator}, opts(cs))
			g.waitTerminal(t, id, 15*time.Second)
			r.stop(t)
			got := g.rollout(t, id)
			if msg := attemptError(got); got.Status != tc.status || !strings.HasPrefix(msg, tc.err) || !strings.Contains(msg, tc.errHas) {
				t.Fatalf("rollout %s, attempt error %q, want %s %q…%q", got.Status, msg, tc.status, tc.err, tc.errHas)
			}
			if tc.reward != nil {
				if got.Reward == nil || *got.Reward != *tc.reward {
					t.Fatalf("reward %v, want %v", got.Reward, *tc.reward)
				}
				var rd struct{ Source string }
				json.Unmarshal(got.RewardData, &rd)
				if rd.Source != tc.source {
					t.Fatalf("reward source %q, want %q (%s)", rd.Source, tc.source, got.RewardData)
				}
			}
			names := cl.created()
			if len(names) != 1 {
				t.Fatalf("jobs created %v, want 1", names)
			}
			_, err := cs.BatchV1().Jobs(ns).Get(context.Background(), names[0], metav1.GetOptions{})
			if tc.deleted != apierrors.IsNotFound(err) {
				t.Fatalf("job deleted: %v, want %v", err, tc.deleted)
			}
			if tc.deleted {
				checkBackgroundDelete(t, cs, names[0])
			}
			// The pod's log tail, redacted: its scoped key never stored.
			key := envOf(cl.job(names[0]).Spec.Template.Spec.Containers[0], "OPENAI_API_KEY")
			logs := g.events(t, id, store.EventLog)
			if len(logs) != 1 {
				t.Fatalf("log events %d, want 1", len(logs))
			}
			var ld struct{ Stream, Text string }
			json.Unmarshal(logs[0].Data, &ld)
			if ld.Stream != "harness" || !strings.Contains(ld.Text, "using key [REDACTED]") || strings.Contains(string(logs[0].Data), key) {
				t.Fatalf("log event %s (key %q)", logs[0].Data, key)
			}
		})
	}
}

// attemptError is the error of the rollout's last attempt.
func attemptError(r store.Rollout) string {
	if len(r.Attempts) == 0 {
		return ""
	}
	return r.Attempts[len(r.Attempts)-1].Error
}

func ptr(f float64) *float64 { return &f }

func checkBackgroundDelete(t *testing.T, cs *fake.Clientset, name string) {
	t.Helper()
	for _, a := range cs.Actions() {
		if d, ok := a.(k8stesting.DeleteActionImpl); ok && d.GetResource().Resource == "jobs" && d.GetName() == name {
			if p := d.GetDeleteOptions().PropagationPolicy; p == nil || *p != metav1.DeletePropagationBackground {
				t.Fatalf("job %s deleted with propagation %v, want Background", name, p)
			}
			return
		}
	}
	t.Fatalf("no delete of job %s among the actions", name)
}

// TestCancelDeletesJob: a rollout cancelled while its Job runs gets its
// heartbeat answered 409, and the Job is deleted; the attempt is left as
// the cancel made it.
func TestCancelDeletesJob(t *testing.T) {
	g := newGateway(t)
	cs := fakeClient()
	cl := newCluster(t, cs)
	id := g.create(t, 1, store.RolloutConfig{}, `{"case":"hang"}`)[0]
	r := serve(t, g, controller.Config{}, opts(cs))
	waitFor(t, "the job", func() bool { return len(cl.created()) == 1 })
	// Heartbeats flow while the job runs.
	time.Sleep(200 * time.Millisecond)
	if _, err := g.st.CancelRollout(context.Background(), id, "test cancel"); err != nil {
		t.Fatal(err)
	}
	name := cl.created()[0]
	waitFor(t, "the job deleted", func() bool {
		_, err := cs.BatchV1().Jobs(ns).Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	checkBackgroundDelete(t, cs, name)
	r.stop(t)
	got := g.rollout(t, id)
	if got.Status != store.RolloutCancelled {
		t.Fatalf("rollout %s %q, want cancelled", got.Status, got.Error)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	end := time.Now().Add(15 * time.Second)
	for !ok() {
		if time.Now().After(end) {
			t.Fatalf("no %s within 15s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRateLimit: with max_jobs_per_minute 2, four claimed attempts get two
// Jobs; the other two wait, heartbeating (never reaped as unresponsive),
// and fail as "controller stopped" (requeued) when the controller stops.
func TestRateLimit(t *testing.T) {
	g := newGateway(t)
	cs := fakeClient()
	cl := newCluster(t, cs)
	ids := g.create(t, 4, store.RolloutConfig{UnresponsiveSeconds: 0.6}, `{"case":"hang"}`)
	o := opts(cs)
	o.MaxJobsPerMinute = 2
	r := serve(t, g, controller.Config{Concurrency: 4}, o)
	waitFor(t, "two jobs", func() bool { return len(cl.created()) == 2 })
	// Well past the unresponsive limit: the waiting attempts heartbeat.
	time.Sleep(1500 * time.Millisecond)
	if n := len(cl.created()); n != 2 {
		t.Fatalf("%d jobs created, want 2 (max_jobs_per_minute 2)", n)
	}
	for _, id := range ids {
		if got := g.rollout(t, id); got.Status != store.RolloutRunning {
			t.Fatalf("rollout %s %s %q, want running", id, got.Status, got.Error)
		}
	}
	r.stop(t)
	for _, id := range ids {
		got := g.rollout(t, id)
		if len(got.Attempts) != 1 || got.Attempts[0].Error != store.AttemptStopped {
			t.Fatalf("rollout %s: attempts %+v, want one failed %q", id, got.Attempts, store.AttemptStopped)
		}
	}
	if l, _ := cs.BatchV1().Jobs(ns).List(context.Background(), metav1.ListOptions{}); len(l.Items) != 0 {
		t.Fatalf("%d jobs left after the controller stopped, want 0", len(l.Items))
	}
}

// TestManifest checks what the controller sets on every Job: the env
// contract in every container (the scoped key, never the admin key), the
// names, labels, TTL, deadline, backoff and restart policy, over the
// default template and custom ones.
func TestManifest(t *testing.T) {
	custom := `apiVersion: batch/v1
kind: Job
metadata:
  name: ignored
  namespace: elsewhere
  labels: {app: {{ json .Input.app }}}
spec:
  backoffLimit: 6
  template:
    spec:
      restartPolicy: OnFailure
      initContainers:
      - name: fetch
        image: busybox
      containers:
      - name: agent
        image: {{ json .Image }}
        command: ["python3", "agent.py", {{ json .RolloutID }}]
        terminationMessagePath: /tmp/reward
        env:
        - {name: OPENAI_API_KEY, value: stale}
        - {name: KEEP, value: "1"}
      - name: sidecar
        image: busybox
`
	ttl60, ttl30 := int32(60), int32(30)
	for _, tc := range []struct {
		name     string
		template string
		ttl      *int32
		wantTTL  int32
		timeout  float64
		deadline int64
		// containers: name → reward file path
		containers map[string]string
		check      func(t *testing.T, j *batchv1.Job)
	}{
		{name: "default template", wantTTL: 1200, containers: map[string]string{"harness": "/dev/termination-log"},
			check: func(t *testing.T, j *batchv1.Job) {
				c := j.Spec.Template.Spec.Containers[0]
				if c.Image != "registry.example/harness:1" || strings.Join(c.Command, " ") != "python3 harness.py" || c.Resources.Limits.Memory().String() != "4Gi" || j.Spec.Template.Spec.ServiceAccountName != "agl-harness" {
					t.Fatalf("container %+v, service account %q", c, j.Spec.Template.Spec.ServiceAccountName)
				}
			}},
		{name: "custom template, ttl 60, timeout", template: custom, ttl: &ttl60, wantTTL: 60, timeout: 2.5, deadline: 3,
			containers: map[string]string{"fetch": "/dev/termination-log", "agent": "/tmp/reward", "sidecar": "/dev/termination-log"},
			check: func(t *testing.T, j *batchv1.Job) {
				c := j.Spec.Template.Spec.Containers[0]
				if j.Labels["app"] != "calc" || envOf(c, "KEEP") != "1" || c.Command[2] != j.Annotations[kubernetes.AnnotRolloutID] {
					t.Fatalf("template values lost: labels %v, env %v, command %v", j.Labels, c.Env, c.Command)
				}
			}},
		{name: "ttl 30", ttl: &ttl30, wantTTL: 30, containers: map[string]string{"harness": "/dev/termination-log"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGateway(t)
			cs := fakeClient()
			cl := newCluster(t, cs)
			id := g.create(t, 1, store.RolloutConfig{TimeoutSeconds: tc.timeout}, `{"case":"hang","app":"calc"}`)[0]
			o := opts(cs)
			o.TTLAfterFinished = tc.ttl
			o.Values.ServiceAccount = "agl-harness"
			o.Values.Resources = kubernetes.Resources{Limits: map[string]string{"memory": "4Gi"}}
			if tc.template != "" {
				tmpl, err := kubernetes.ParseTemplate("custom", tc.template)
				if err != nil {
					t.Fatal(err)
				}
				o.Template = tmpl
			}
			r := serve(t, g, controller.Config{Command: []string{"python3", "harness.py"}, Env: []string{"EXTRA=x", "OPENAI_BASE_URL=overridden"}}, o)
			waitFor(t, "the job", func() bool { return len(cl.created()) == 1 })
			r.stop(t)
			j := cl.job(cl.created()[0])
			rl := g.rollout(t, id)
			aid := rl.Attempts[0].ID
			if j.Name != kubernetes.JobName(id, aid) || j.Namespace != ns || len(j.Name) > 63 {
				t.Fatalf("job %s/%s, want %s/%s", j.Namespace, j.Name, ns, kubernetes.JobName(id, aid))
			}
			for _, m := range []metav1.ObjectMeta{j.ObjectMeta, j.Spec.Template.ObjectMeta} {
				if m.Labels[kubernetes.LabelManagedBy] != "agl" || m.Labels[kubernetes.LabelJob] != j.Name || m.Annotations[kubernetes.AnnotRolloutID] != id || m.Annotations[kubernetes.AnnotAttemptID] != aid {
					t.Fatalf("labels %v annotations %v", m.Labels, m.Annotations)
				}
			}
			if j.Spec.BackoffLimit == nil || *j.Spec.BackoffLimit != 0 || j.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
				t.Fatalf("backoffLimit %v restartPolicy %s, want 0 Never", j.Spec.BackoffLimit, j.Spec.Template.Spec.RestartPolicy)
			}
			if j.Spec.TTLSecondsAfterFinished == nil || *j.Spec.TTLSecondsAfterFinished != tc.wantTTL {
				t.Fatalf("ttlSecondsAfterFinished %v, want %d", j.Spec.TTLSecondsAfterFinished, tc.wantTTL)
			}
			if got := j.Spec.ActiveDeadlineSeconds; (tc.deadline == 0) != (got == nil) || got != nil && *got != tc.deadline {
				t.Fatalf("activeDeadlineSeconds %v, want %d", got, tc.deadline)
			}
			all := append(append([]corev1.Container(nil), j.Spec.Template.Spec.InitContainers...), j.Spec.Template.Spec.Containers...)
			if len(all) != len(tc.containers) {
				t.Fatalf("%d containers, want %d", len(all), len(tc.containers))
			}
			base := podGateway + "/r/" + id + "/" + aid
			for _, c := range all {
				want := map[string]string{
					"OPENAI_BASE_URL": base + "/v1", "ANTHROPIC_BASE_URL": base, "GOOGLE_GEMINI_BASE_URL": base, "AGL_EVENTS_URL": base + "/events",
					"AGL_ROLLOUT_ID": id, "AGL_ATTEMPT_ID": aid, "AGL_MODE": "train", "AGL_TASK": `{"case":"hang","app":"calc"}`,
					"AGL_REWARD_FILE": tc.containers[c.Name], "EXTRA": "x",
				}
				for k, v := range want {
					if got := envOf(c, k); got != v {
						t.Errorf("container %s: %s=%q, want %q", c.Name, k, got, v)
					}
				}
				key := envOf(c, "OPENAI_API_KEY")
				if !strings.HasPrefix(key, store.KeyPrefix) || key != envOf(c, "ANTHROPIC_API_KEY") || key != envOf(c, "GEMINI_API_KEY") {
					t.Errorf("container %s: OPENAI_API_KEY %q, want the attempt's scoped key", c.Name, key)
				}
				seen := map[string]int{}
				for _, e := range c.Env {
					seen[e.Name]++
					if e.Value == adminKey || seen[e.Name] > 1 {
						t.Errorf("container %s: env %s=%q (admin key or duplicate)", c.Name, e.Name, e.Value)
					}
				}
			}
			if tc.check != nil {
				tc.check(t, j)
			}
		})
	}
}

// TestBadTemplate: a template that renders no valid Job fails the attempt
// with an error naming what was wrong, and creates nothing.
func TestBadTemplate(t *testing.T) {
	for _, tc := range []struct{ name, template, want string }{
		{"unknown field", "apiVersion: batch/v1\nkind: Job\nspec:\n  template:\n    spec:\n      containers: [{name: a, image: b, imagee: c}]\n", `unknown field "imagee"`},
		{"not a Job", "apiVersion: v1\nkind: Pod\n", "rendered v1 \"Pod\", want apiVersion batch/v1, kind Job"},
		{"no containers", "apiVersion: batch/v1\nkind: Job\n", "without containers"},
		{"missing key", "apiVersion: batch/v1\nkind: Job\nmetadata: {name: {{ .Input.nope.deeper }}}\n", "job template:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGateway(t)
			cs := fakeClient()
			cl := newCluster(t, cs)
			id := g.create(t, 1, store.RolloutConfig{}, `{"case":"succeed"}`)[0]
			o := opts(cs)
			tmpl, err := kubernetes.ParseTemplate("bad", tc.template)
			if err != nil {
				t.Fatal(err)
			}
			o.Template = tmpl
			r := serve(t, g, controller.Config{}, o)
			g.waitTerminal(t, id, 10*time.Second)
			r.stop(t)
			got := g.rollout(t, id)
			if msg := attemptError(got); got.Status != store.RolloutFailed || !strings.HasPrefix(msg, "kubernetes: ") || !strings.Contains(msg, tc.want) {
				t.Fatalf("rollout %s, attempt error %q, want failed with %q", got.Status, msg, tc.want)
			}
			if n := len(cl.created()); n != 0 {
				t.Fatalf("%d jobs created", n)
			}
		})
	}
}

// TestOptions: section → options errors name the field.
func TestOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    kubernetes.Section
		o    func(*kubernetes.Options)
		want string
	}{
		{name: "no image, no template", want: "set image"},
		{name: "both templates", s: kubernetes.Section{JobTemplate: "x", JobTemplateFile: "y"}, want: "not both"},
		{name: "missing template file", s: kubernetes.Section{JobTemplateFile: "nope.tmpl"}, want: "job_template_file"},
		{name: "bad template", s: kubernetes.Section{JobTemplate: "{{ .Oops"}, want: "job template"},
		{name: "bad pull policy", s: kubernetes.Section{Image: "x", ImagePullPolicy: "Sometimes"}, want: "image_pull_policy"},
		{name: "negative ttl", s: kubernetes.Section{Image: "x", TTLAfterFinished: new(int32(-1))}, want: "ttl_after_finished -1: want at least 10"},
		{name: "ttl shorter than a poll", s: kubernetes.Section{Image: "x", TTLAfterFinished: new(int32(0))}, want: "ttl_after_finished 0: want at least 10"},
		{name: "negative rate", s: kubernetes.Section{Image: "x", MaxJobsPerMinute: -1}, want: "max_jobs_per_minute"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := tc.s.Options(t.TempDir())
			if err == nil {
				o.Client = fake.NewClientset()
				_, err = kubernetes.New(o)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}

// TestJobName: distinct attempts get distinct valid names.
func TestJobName(t *testing.T) {
	seen := map[string]bool{}
	for _, ids := range [][2]string{{"r-1", "a-1"}, {"r-1", "a-2"}, {"R_1", "a-1"}, {strings.Repeat("x", 100), strings.Repeat("y", 100)}, {"--", "é"}} {
		n := kubernetes.JobName(ids[0], ids[1])
		if len(n) > 63 || seen[n] || strings.Trim(n, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" || strings.HasSuffix(n, "-") {
			t.Fatalf("JobName(%q, %q) = %q", ids[0], ids[1], n)
		}
		seen[n] = true
	}
}

// TestALJobTemplate: an Agent Lightning rollout's config.k8s.job_template
// (AL's Jinja, with job_name, input and yaml_escape) renders the Job as
// AL's reconciler does, with agl's overrides, the env contract and AL's
// own variables (AGL_KEY = the scoped key, never the admin key); a
// template that renders no single Job fails the attempt naming why.
func TestALJobTemplate(t *testing.T) {
	const tmpl = `apiVersion: batch/v1
kind: Job
metadata:
  name: {{ job_name }}
  labels: {task: {{ input.name | yaml_escape }}}
spec:
  template:
    spec:
      containers:
      - name: agent
        image: registry.example/al-agent:1
        args: [{{ input.question | yaml_escape }}, "{{ input.n }}"{% if input.fast %}, "--fast"{% endif %}]
        env:
        - {name: AGL_KEY, value: stale}
`
	alMeta := func(tmpl string) string {
		b, _ := json.Marshal(map[string]any{"_al": map[string]any{"config": map[string]any{"k8s": map[string]any{"job_template": tmpl}}}})
		return string(b)
	}
	for _, tc := range []struct {
		name, template, want string
	}{
		{name: "renders", template: tmpl},
		{name: "two documents", template: tmpl + "---\n" + tmpl, want: "exactly one YAML document (rendered 2)"},
		{name: "bad jinja", template: "kind: Job\nname: {{ job_name ", want: "config.k8s.job_template"},
		{name: "not a Job", template: "apiVersion: v1\nkind: Pod\n", want: `want apiVersion batch/v1, kind Job`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGateway(t)
			cs := fakeClient()
			cl := newCluster(t, cs)
			rs, err := g.st.CreateRollouts(context.Background(), []store.NewRollout{{
				Task: json.RawMessage(`{"name":"q: \"1\"","question":"what is 2+3?","n":3,"fast":true}`), Mode: store.ModeVal,
				Metadata: json.RawMessage(alMeta(tc.template)),
			}})
			if err != nil {
				t.Fatal(err)
			}
			id := rs[0].ID
			r := serve(t, g, controller.Config{}, opts(cs))
			if tc.want != "" {
				g.waitTerminal(t, id, 10*time.Second)
				r.stop(t)
				got := g.rollout(t, id)
				if msg := attemptError(got); got.Status != store.RolloutFailed || !strings.Contains(msg, tc.want) {
					t.Fatalf("rollout %s, attempt error %q, want failed with %q", got.Status, msg, tc.want)
				}
				if n := len(cl.created()); n != 0 {
					t.Fatalf("%d jobs created", n)
				}
				return
			}
			waitFor(t, "the job", func() bool { return len(cl.created()) == 1 })
			r.stop(t)
			j := cl.job(cl.created()[0])
			aid := g.rollout(t, id).Attempts[0].ID
			c := j.Spec.Template.Spec.Containers[0]
			if j.Name != kubernetes.JobName(id, aid) || j.Labels["task"] != `q: "1"` || strings.Join(c.Args, "|") != "what is 2+3?|3|--fast" {
				t.Fatalf("job %s labels %v args %q", j.Name, j.Labels, c.Args)
			}
			if j.Spec.BackoffLimit == nil || *j.Spec.BackoffLimit != 0 || j.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever || j.Labels[kubernetes.LabelManagedBy] != "agl" {
				t.Fatalf("agl's overrides missing: backoff %v restart %s labels %v", j.Spec.BackoffLimit, j.Spec.Template.Spec.RestartPolicy, j.Labels)
			}
			al := podGateway + "/al"
			want := map[string]string{
				"AGL_OPENAI_BASE_URL": al + "/proxy/rollout/" + id + "/attempt/0/mode/val/openai/v1",
				"AGL_EVENT_URL":       al + "/api/rollouts/" + id + "/attempt/0/events",
				"OPENAI_BASE_URL":     podGateway + "/r/" + id + "/" + aid + "/v1",
			}
			for k, v := range want {
				if got := envOf(c, k); got != v {
					t.Errorf("%s=%q, want %q", k, got, v)
				}
			}
			if key := envOf(c, "AGL_KEY"); !strings.HasPrefix(key, store.KeyPrefix) || key != envOf(c, "OPENAI_API_KEY") {
				t.Errorf("AGL_KEY %q, want the attempt's scoped key", key)
			}
			for _, e := range c.Env {
				if e.Value == adminKey {
					t.Errorf("env %s holds the admin key", e.Name)
				}
			}
		})
	}
}

// Package kubernetes is agl's Kubernetes controller backend (controller
// kind "kubernetes"): one batch/v1 Job per claimed attempt, rendered from a
// Go-template manifest, watched until it ends. It runs on
// controller.Serve, which keeps the local controller's rules; this package
// maps them onto Kubernetes:
//
//   - The manifest is the configured job template (a whole Job, as Agent
//     Lightning v1.0's k8s_reconciler takes it) or the built-in one filled
//     from the section's image, command, resources, service account…
//     Then the controller sets what it owns: the name, the namespace, the
//     agl labels and annotations, backoffLimit 0 (the store retries, as a
//     new attempt), ttlSecondsAfterFinished, activeDeadlineSeconds (the
//     rollout's timeout_seconds) and restartPolicy Never.
//   - Every container (init containers too) gets the env contract of the
//     local controller (controller.Attempt.Env), with the gateway as pods
//     reach it (gateway_url) and the attempt's scoped key — never the
//     admin key. AGL_REWARD_FILE is the container's termination message
//     path (/dev/termination-log by default): what the harness container
//     writes there (Kubernetes keeps up to 4096 bytes) is its reward file.
//   - Jobs are created at most max_jobs_per_minute (a token bucket).
//   - While the Job is seen pending or running, the attempt heartbeats; a
//     heartbeat answered 409 (cancelled, reaped elsewhere) deletes the Job
//     (propagation background) and leaves the attempt alone. Past the
//     rollout's timeout the Job is deleted and the attempt fails with
//     "timeout: …".
//   - A Job that completes succeeds the attempt (the reward from the
//     configured source: reward file, reward events, or the evaluator run
//     on the controller's machine with the pod's log as AGL_LOG_FILE); a
//     failed Job fails it with the Job's reason and the harness
//     container's exit code and last log line.
//   - The last log_tail_lines of each container's log become one "log"
//     event each (stream: the container's name), redacted like the local
//     controller's.
package kubernetes

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/ardanlabs/jinja"
	"golang.org/x/time/rate"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	batchclient "k8s.io/client-go/kubernetes/typed/batch/v1"
	coreclient "k8s.io/client-go/kubernetes/typed/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/aglrl/agl/controller"
	"github.com/aglrl/agl/store"
)

// Labels and annotations the controller puts on its Jobs and their pods.
const (
	LabelManagedBy  = "app.kubernetes.io/managed-by"
	ManagedBy       = "agl"
	LabelJob        = "agl.dev/job"
	LabelRollout    = "agl.dev/rollout"
	LabelAttempt    = "agl.dev/attempt"
	AnnotRolloutID  = "agl.dev/rollout-id"
	AnnotAttemptID  = "agl.dev/attempt-id"
	HarnessName     = "harness"
	defaultTermPath = "/dev/termination-log"
)

// Client is the part of a clientset the backend uses (client-go's
// kubernetes.Interface, its fake, or Section.Client's two typed clients,
// which keep the other API groups' clients out of the binary).
type Client interface {
	BatchV1() batchclient.BatchV1Interface
	CoreV1() coreclient.CoreV1Interface
}

// Options configure the backend. Zero values take the documented defaults.
type Options struct {
	// Client reaches the cluster (required).
	Client Client
	// Namespace of the Jobs (default "default").
	Namespace string
	// GatewayURL is the gateway as pods reach it (default: the
	// controller's own gateway URL).
	GatewayURL string
	// Template renders the Job manifest (default: DefaultTemplate).
	Template *template.Template
	// Values fill the template.
	Values Values
	// TTLAfterFinished is the Job's ttlSecondsAfterFinished (default
	// 1200, at least minTTL).
	TTLAfterFinished *int32
	// MaxJobsPerMinute bounds Job creation (default 100).
	MaxJobsPerMinute int
	// PollInterval is how often a Job and its pods are read (default 2s).
	PollInterval time.Duration
	// LogTailLines is how many last lines of each container's log are
	// read (default 200).
	LogTailLines int64
}

// Values are the section's fields the templates see.
type Values struct {
	Image           string
	ImagePullPolicy string
	ServiceAccount  string
	WorkingDir      string
	Labels          map[string]string
	Annotations     map[string]string
	NodeSelector    map[string]string
	Resources       Resources
}

// TemplateData is what a job template is executed with.
type TemplateData struct {
	Values
	// JobName and Namespace are the Job's (the controller sets them on the
	// rendered Job anyway).
	JobName   string
	Namespace string
	RolloutID string
	AttemptID string
	// Mode is "train" or "val".
	Mode string
	// Task is the rollout's task, decoded JSON (AL's "input"); Input is
	// the same value.
	Task  any
	Input any
	// Metadata is the rollout's metadata, decoded JSON (nil if none).
	Metadata any
	// Command is controller.command (may be empty: the image's entrypoint).
	Command []string
}

var funcs = template.FuncMap{
	// json quotes any value as JSON, which is also YAML (AL's yaml_escape).
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
}

// DefaultTemplate is the Job the section's fields describe.
const DefaultTemplate = `apiVersion: batch/v1
kind: Job
metadata:
  name: {{ json .JobName }}
spec:
  template:
    spec:
      {{- with .ServiceAccount }}
      serviceAccountName: {{ json . }}
      {{- end }}
      {{- with .NodeSelector }}
      nodeSelector: {{ json . }}
      {{- end }}
      containers:
      - name: harness
        image: {{ json .Image }}
        {{- with .ImagePullPolicy }}
        imagePullPolicy: {{ json . }}
        {{- end }}
        {{- with .Command }}
        command: {{ json . }}
        {{- end }}
        {{- with .WorkingDir }}
        workingDir: {{ json . }}
        {{- end }}
        {{- if or .Resources.Requests .Resources.Limits }}
        resources: {{ json .Resources }}
        {{- end }}
`

var defaultTemplate = template.Must(template.New("default").Option("missingkey=error").Funcs(funcs).Parse(DefaultTemplate))

// minTTL is the shortest ttl_after_finished: a finished Job must outlive
// the controller's next read of it (poll_interval, API latency).
const minTTL = 10

// Backend runs attempts as Jobs (a controller.Backend).
type Backend struct {
	o       Options
	limiter *rate.Limiter
}

// New checks o and returns the backend.
func New(o Options) (*Backend, error) {
	if o.Client == nil {
		return nil, errors.New("controller.kubernetes: no client")
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.Template == nil {
		if o.Values.Image == "" {
			return nil, errors.New("controller.kubernetes: set image (or a job template)")
		}
		o.Template = defaultTemplate
	}
	if o.TTLAfterFinished == nil {
		ttl := int32(1200)
		o.TTLAfterFinished = &ttl
	} else if *o.TTLAfterFinished < minTTL {
		return nil, fmt.Errorf("controller.kubernetes: ttl_after_finished %d: want at least %d (seconds; a Job deleted sooner may vanish before the controller reads how it ended)", *o.TTLAfterFinished, minTTL)
	}
	if o.MaxJobsPerMinute < 0 {
		return nil, fmt.Errorf("controller.kubernetes: max_jobs_per_minute %d: want > 0", o.MaxJobsPerMinute)
	}
	if o.MaxJobsPerMinute == 0 {
		o.MaxJobsPerMinute = 100
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 2 * time.Second
	}
	if o.LogTailLines <= 0 {
		o.LogTailLines = 200
	}
	switch corev1.PullPolicy(o.Values.ImagePullPolicy) {
	case "", corev1.PullAlways, corev1.PullNever, corev1.PullIfNotPresent:
	default:
		return nil, fmt.Errorf("controller.kubernetes: image_pull_policy %q: want Always, IfNotPresent or Never", o.Values.ImagePullPolicy)
	}
	// A bucket of one minute's jobs, refilled evenly.
	lim := rate.NewLimiter(rate.Limit(float64(o.MaxJobsPerMinute)/60), o.MaxJobsPerMinute)
	return &Backend{o: o, limiter: lim}, nil
}

// Namespace is where the Jobs are created.
func (b *Backend) Namespace() string { return b.o.Namespace }

// JobName is the Job of an attempt: a DNS label (≤63 characters) made of
// the ids and a hash of both, so that distinct attempts never share one.
func JobName(rolloutID, attemptID string) string {
	h := sha256.Sum256([]byte(rolloutID + "\x00" + attemptID))
	return "agl-" + dnsPart(rolloutID, 20) + "-" + dnsPart(attemptID, 20) + "-" + hex.EncodeToString(h[:5])
}

// dnsPart keeps up to n lower-case letters, digits and inner dashes of s.
func dnsPart(s string, n int) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if b.Len() >= n {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0:
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-")
	if out == "" {
		out = "x"
	}
	return out
}

// labelValue makes s a valid label value (≤63 of [A-Za-z0-9._-], starting
// and ending alphanumeric); the full id is in an annotation.
func labelValue(s string) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= 63 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return strings.Trim(b.String(), "._-")
}

// Manifest renders the attempt's Job: the template, then what the
// controller owns (see the package doc), then the env contract in every
// container.
func (b *Backend) Manifest(at *controller.Attempt) (*batchv1.Job, error) {
	claim := at.Claim()
	r := claim.Rollout
	name := JobName(r.ID, claim.Attempt.ID)
	data := TemplateData{
		Values: b.o.Values, JobName: name, Namespace: b.o.Namespace, RolloutID: r.ID, AttemptID: claim.Attempt.ID,
		Mode: string(r.Mode), Command: at.Command(),
	}
	if len(r.Task) > 0 {
		if err := json.Unmarshal(r.Task, &data.Task); err != nil {
			return nil, fmt.Errorf("task JSON: %w", err)
		}
	}
	data.Input = data.Task
	if len(r.Metadata) > 0 {
		if err := json.Unmarshal(r.Metadata, &data.Metadata); err != nil {
			return nil, fmt.Errorf("metadata JSON: %w", err)
		}
	}
	var out strings.Builder
	if src, ok := at.ALJobTemplate(); ok {
		doc, err := renderAL(src, name, r.Task)
		if err != nil {
			return nil, err
		}
		out.WriteString(doc)
	} else if err := b.o.Template.Execute(&out, data); err != nil {
		return nil, fmt.Errorf("job template: %w", err)
	}
	job := &batchv1.Job{}
	if err := yaml.UnmarshalStrict([]byte(out.String()), job); err != nil {
		return nil, fmt.Errorf("job template rendered no valid Job: %w", err)
	}
	if job.Kind != "Job" || (job.APIVersion != "batch/v1") {
		return nil, fmt.Errorf("job template rendered %s %q, want apiVersion batch/v1, kind Job", job.APIVersion, job.Kind)
	}
	pod := &job.Spec.Template
	if len(pod.Spec.Containers) == 0 {
		return nil, errors.New("job template rendered a Job without containers")
	}
	job.Name, job.GenerateName, job.Namespace = name, "", b.o.Namespace
	labels := map[string]string{LabelManagedBy: ManagedBy, LabelJob: name, LabelRollout: labelValue(r.ID), LabelAttempt: labelValue(claim.Attempt.ID)}
	annots := map[string]string{AnnotRolloutID: r.ID, AnnotAttemptID: claim.Attempt.ID}
	for _, m := range []*metav1.ObjectMeta{&job.ObjectMeta, &pod.ObjectMeta} {
		m.Labels = merge(merge(m.Labels, b.o.Values.Labels), labels)
		m.Annotations = merge(merge(m.Annotations, b.o.Values.Annotations), annots)
	}
	zero := int32(0)
	job.Spec.BackoffLimit = &zero
	job.Spec.TTLSecondsAfterFinished = b.o.TTLAfterFinished
	if t := r.Config.TimeoutSeconds; t > 0 {
		d := int64(math.Ceil(t))
		job.Spec.ActiveDeadlineSeconds = &d
	}
	// The Job controller picks the selector and its pod labels itself.
	job.Spec.Selector, job.Spec.ManualSelector = nil, nil
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	for i := range pod.Spec.InitContainers {
		b.inject(at, &pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		b.inject(at, &pod.Spec.Containers[i])
	}
	return job, nil
}

// yamlEscape is AL's one custom filter: json.dumps(str(value)), which is
// Jinja's own `string | tojson` (a JSON string is a YAML scalar).
var yamlEscape = regexp.MustCompile(`\|\s*yaml_escape\b`)

// renderAL renders an Agent Lightning rollout's config.k8s.job_template as
// AL v1.0's Kubernetes reconciler does (build_job_spec): a Jinja template
// of the variables job_name (here the Job's real name) and input (the
// rollout's input, numbers as Python's json.loads gives them), which must
// render exactly one YAML document. The Job then gets the same overrides
// as agl's own templates (name, namespace, labels, backoffLimit 0, TTL,
// deadline, restartPolicy Never, the env contract plus AL's variables).
func renderAL(src, jobName string, task json.RawMessage) (string, error) {
	t, err := jinja.Compile(yamlEscape.ReplaceAllString(src, "| string | tojson"))
	if err != nil {
		return "", fmt.Errorf("config.k8s.job_template: %w", err)
	}
	var input any
	if len(task) > 0 {
		dec := json.NewDecoder(bytes.NewReader(task))
		dec.UseNumber()
		if err := dec.Decode(&input); err != nil {
			return "", fmt.Errorf("task JSON: %w", err)
		}
	}
	out, err := t.Render(map[string]any{"job_name": jobName, "input": pyNumbers(input)})
	if err != nil {
		return "", fmt.Errorf("config.k8s.job_template: %w", err)
	}
	docs := 0
	for _, d := range yamlDocSep.Split("\n"+out, -1) {
		if strings.TrimSpace(d) != "" {
			docs++
		}
	}
	if docs != 1 {
		return "", fmt.Errorf("config.k8s.job_template must render exactly one YAML document (rendered %d)", docs)
	}
	return out, nil
}

var yamlDocSep = regexp.MustCompile(`\n---[ \t]*(?:\n|$)`)

// pyNumbers turns json.Numbers into int64 where integral, else float64,
// as Python's json.loads types them (Jinja prints 3, not 3.0).
func pyNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = pyNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = pyNumbers(e)
		}
	}
	return v
}

func merge(dst, src map[string]string) map[string]string {
	if dst == nil && len(src) > 0 {
		dst = map[string]string{}
	}
	for k, v := range src {
		dst[k] = v
	}
	return dst
}

// inject sets the env contract in a container, replacing entries of the
// same names (and any valueFrom they had).
func (b *Backend) inject(at *controller.Attempt, c *corev1.Container) {
	path := c.TerminationMessagePath
	if path == "" {
		path = defaultTermPath
	}
	for _, kv := range at.Env(b.o.GatewayURL, path) {
		k, v, _ := strings.Cut(kv, "=")
		c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == k })
		c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: v})
	}
}

// RunAttempt creates the attempt's Job and follows it to its end.
func (b *Backend) RunAttempt(ctx context.Context, at *controller.Attempt) {
	log := at.Logger()
	job, err := b.Manifest(at)
	if err != nil {
		at.Revoke()
		at.Finish(ctx, controller.Result{Failure: "kubernetes: " + err.Error()})
		return
	}
	log = log.With("job", job.Name, "namespace", job.Namespace)
	claim := at.Claim()
	var deadline <-chan time.Time
	timeout := time.Duration(claim.Rollout.Config.TimeoutSeconds * float64(time.Second))
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	hb := time.NewTicker(at.HeartbeatInterval())
	defer hb.Stop()

	// Wait for the rate limit, heartbeating meanwhile.
	res := b.limiter.Reserve()
	wait := time.NewTimer(res.Delay())
	if d := res.Delay(); d > 0 {
		log.Info("kubernetes: job creation rate limit reached, waiting", "wait", d, "max_jobs_per_minute", b.o.MaxJobsPerMinute)
	}
	for waiting := true; waiting; {
		select {
		case <-wait.C:
			waiting = false
		case <-hb.C:
			if err := at.Heartbeat(ctx); errors.Is(err, controller.ErrLost) {
				res.Cancel()
				wait.Stop()
				return
			}
		case <-deadline:
			res.Cancel()
			at.Revoke()
			at.Finish(ctx, controller.Result{Failure: fmt.Sprintf("timeout: no job created within %s (max_jobs_per_minute %d)", timeout, b.o.MaxJobsPerMinute)})
			return
		case <-ctx.Done():
			res.Cancel()
			wait.Stop()
			at.Revoke()
			at.Finish(context.Background(), controller.Result{Failure: store.AttemptStopped})
			return
		}
	}

	jobs := b.o.Client.BatchV1().Jobs(job.Namespace)
	if err := b.create(ctx, job); err != nil {
		at.Revoke()
		if ctx.Err() != nil {
			at.Finish(context.Background(), controller.Result{Failure: store.AttemptStopped})
			return
		}
		at.Finish(ctx, controller.Result{Failure: "kubernetes: create job " + job.Name + ": " + err.Error()})
		return
	}
	log.Info("kubernetes: job created")

	poll := time.NewTicker(b.o.PollInterval)
	defer poll.Stop()
	alive := true // the Job was seen pending or running at the last read
	for {
		select {
		case <-hb.C:
			if !alive {
				continue
			}
			if err := at.Heartbeat(ctx); errors.Is(err, controller.ErrLost) {
				log.Info("kubernetes: attempt ended elsewhere, deleting its job")
				b.delete(log, job)
				return
			} else if err != nil && ctx.Err() == nil {
				log.Warn("kubernetes: heartbeat failed", "err", err)
			}
		case <-poll.C:
			cur, err := jobs.Get(ctx, job.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				at.Revoke()
				at.Finish(ctx, controller.Result{Failure: "kubernetes: job " + job.Name + " disappeared (deleted outside agl)"})
				return
			}
			if err != nil {
				alive = false
				if ctx.Err() == nil {
					log.Warn("kubernetes: read job", "err", err)
				}
				continue
			}
			alive = true
			st := b.outcome(ctx, cur)
			if !st.done {
				continue
			}
			at.Revoke()
			res := controller.Result{Failure: st.failure, ExitCode: st.exitCode, RewardFile: st.reward, Logs: st.logs, LastLine: true}
			log.Info("kubernetes: job ended", "failure", at.Redact(res.Failure))
			at.Finish(ctx, res)
			return
		case <-deadline:
			at.Revoke()
			logs := b.logs(context.WithoutCancel(ctx), job.Name)
			b.delete(log, job)
			log.Info("kubernetes: attempt timed out, job deleted", "timeout", timeout)
			at.Finish(ctx, controller.Result{Failure: fmt.Sprintf("timeout: job %s deleted after %s", job.Name, timeout), Logs: logs.logs})
			return
		case <-ctx.Done():
			at.Revoke()
			logs := b.logs(context.Background(), job.Name)
			b.delete(log, job)
			at.Finish(context.Background(), controller.Result{Failure: store.AttemptStopped, Logs: logs.logs})
			return
		}
	}
}

// create creates the Job, retrying errors that may pass (not a refusal of
// the manifest) a few times.
func (b *Backend) create(ctx context.Context, job *batchv1.Job) error {
	jobs := b.o.Client.BatchV1().Jobs(job.Namespace)
	var err error
	for try := 0; try < 4; try++ {
		if try > 0 {
			t := time.NewTimer(time.Duration(500<<try) * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
		_, err = jobs.Create(ctx, job, metav1.CreateOptions{})
		if err == nil || apierrors.IsInvalid(err) || apierrors.IsAlreadyExists(err) || apierrors.IsForbidden(err) ||
			apierrors.IsUnauthorized(err) || apierrors.IsBadRequest(err) || apierrors.IsNotFound(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// delete deletes the Job and, in the background, its pods.
func (b *Backend) delete(log *slog.Logger, job *batchv1.Job) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bg := metav1.DeletePropagationBackground
	err := b.o.Client.BatchV1().Jobs(job.Namespace).Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
	if err != nil && !apierrors.IsNotFound(err) {
		log.Error("kubernetes: delete job", "err", err)
	}
}

// outcome is what a Job's status says.
type outcome struct {
	done     bool
	failure  string
	exitCode int
	reward   []byte
	logs     []controller.Log
}

// outcome reads a Job's conditions and, once it ended, its pod: the
// harness container's exit code and termination message, and the logs.
func (b *Backend) outcome(ctx context.Context, job *batchv1.Job) outcome {
	var o outcome
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete, batchv1.JobSuccessCriteriaMet:
			o.done = true
		case batchv1.JobFailed, batchv1.JobFailureTarget:
			o.done = true
			o.failure = "kubernetes: job " + job.Name + " failed: " + c.Reason
			if c.Reason == "DeadlineExceeded" {
				o.failure = "timeout: job " + job.Name + " exceeded its activeDeadlineSeconds"
			}
			if c.Message != "" {
				o.failure += " (" + c.Message + ")"
			}
		}
		if o.done {
			break
		}
	}
	if !o.done {
		if job.Status.Succeeded > 0 {
			o.done = true
		} else if job.Status.Failed > 0 {
			o.done, o.failure = true, "kubernetes: job "+job.Name+" failed"
		}
	}
	if !o.done {
		// A pod that can never start fails the attempt now rather than at
		// its timeout.
		if msg := b.unstartable(ctx, job.Name); msg != "" {
			o.done, o.failure = true, "kubernetes: job "+job.Name+": "+msg
		} else {
			return o
		}
	}
	p := b.logs(ctx, job.Name)
	o.logs = p.logs
	if p.harness != nil {
		if t := p.harness.State.Terminated; t != nil {
			o.exitCode = int(t.ExitCode)
			if o.failure == "" {
				o.reward = []byte(t.Message)
			}
			if o.failure != "" && t.ExitCode != 0 {
				o.failure += "; container " + p.harness.Name + ": exit code " + strconv.Itoa(int(t.ExitCode))
				if t.Reason != "" {
					o.failure += " (" + t.Reason + ")"
				}
			}
		}
	}
	if o.failure != "" && o.exitCode == 0 {
		o.exitCode = -1
	}
	return o
}

// unstartableReasons are waiting reasons of a container that no wait mends.
var unstartableReasons = map[string]bool{"InvalidImageName": true, "ErrImageNeverPull": true}

func (b *Backend) unstartable(ctx context.Context, name string) string {
	pods, err := b.pods(ctx, name)
	if err != nil {
		return ""
	}
	for _, p := range pods {
		for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
			if w := cs.State.Waiting; w != nil && unstartableReasons[w.Reason] {
				return "container " + cs.Name + ": " + w.Reason + ": " + w.Message
			}
		}
	}
	return ""
}

func (b *Backend) pods(ctx context.Context, name string) ([]corev1.Pod, error) {
	l, err := b.o.Client.CoreV1().Pods(b.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelJob + "=" + name})
	if err != nil {
		return nil, err
	}
	// Newest first.
	slices.SortFunc(l.Items, func(a, b corev1.Pod) int {
		return b.CreationTimestamp.Time.Compare(a.CreationTimestamp.Time)
	})
	return l.Items, nil
}

// podLogs is what was read of a Job's pod.
type podLogs struct {
	// logs are the log tails, the harness container's first.
	logs    []controller.Log
	harness *corev1.ContainerStatus
}

// logs reads the log tails of the Job's newest pod, one per container,
// and the harness container's status: the container named "harness",
// else the first.
func (b *Backend) logs(ctx context.Context, name string) podLogs {
	var out podLogs
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pods, err := b.pods(ctx, name)
	if err != nil || len(pods) == 0 || len(pods[0].Spec.Containers) == 0 {
		return out
	}
	p := pods[0]
	harness := p.Spec.Containers[0].Name
	if slices.ContainsFunc(p.Spec.Containers, func(c corev1.Container) bool { return c.Name == HarnessName }) {
		harness = HarnessName
	}
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == harness {
			out.harness = &p.Status.ContainerStatuses[i]
		}
	}
	names := []string{harness}
	for _, c := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
		if c.Name != harness {
			names = append(names, c.Name)
		}
	}
	for _, c := range names {
		n := b.o.LogTailLines
		raw, err := b.o.Client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c, TailLines: &n}).DoRaw(ctx)
		if err != nil || len(raw) == 0 {
			if c == harness {
				out.logs = append(out.logs, controller.Log{Stream: c}) // keeps the harness first
			}
			continue
		}
		lines := int64(strings.Count(strings.TrimRight(string(raw), "\n"), "\n") + 1)
		out.logs = append(out.logs, controller.Log{Stream: c, Text: string(raw), Bytes: int64(len(raw)), Truncated: lines >= n})
	}
	return out
}

package kubernetes

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/template"
	"time"

	"go.yaml.in/yaml/v3"
	batchclient "k8s.io/client-go/kubernetes/typed/batch/v1"
	coreclient "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Section is the controller section's "kubernetes:" part (kind kubernetes):
//
//	controller:
//	  kind: kubernetes
//	  command: [python3, harness.py]       # the container's command (optional with an image's entrypoint)
//	  env: {CALC_DIGITS: "3"}              # added to every container
//	  concurrency: 16
//	  kubernetes:
//	    namespace: agl                     # default "default"
//	    gateway_url: http://agl-gateway.agl:8080  # the gateway as pods reach it (AL's agent_url)
//	    image: registry.example/harness:1.2
//	    image_pull_policy: IfNotPresent
//	    service_account: agl-harness
//	    working_dir: /work
//	    labels: {team: rl}                 # on the Job and its pods
//	    annotations: {}
//	    node_selector: {pool: cpu}
//	    resources: {requests: {cpu: "1", memory: 2Gi}, limits: {memory: 4Gi}}
//	    job_template_file: job.yaml.tmpl   # or job_template: | … (a whole batch/v1 Job, Go text/template)
//	    ttl_after_finished: 1200           # seconds (AL's default; at least 10)
//	    max_jobs_per_minute: 100           # AL's default
//	    poll_interval: 2s                  # Job/Pod status reads
//	    log_tail_lines: 200                # lines of each container's log read
//	    kubeconfig: ~/.kube/config         # default: in-cluster, else $KUBECONFIG, else ~/.kube/config
//	    context: ""                        # kubeconfig context (default: its current one)
type Section struct {
	Namespace        string            `yaml:"namespace"`
	GatewayURL       string            `yaml:"gateway_url"`
	Image            string            `yaml:"image"`
	ImagePullPolicy  string            `yaml:"image_pull_policy"`
	ServiceAccount   string            `yaml:"service_account"`
	WorkingDir       string            `yaml:"working_dir"`
	Labels           map[string]string `yaml:"labels"`
	Annotations      map[string]string `yaml:"annotations"`
	NodeSelector     map[string]string `yaml:"node_selector"`
	Resources        Resources         `yaml:"resources"`
	JobTemplate      string            `yaml:"job_template"`
	JobTemplateFile  string            `yaml:"job_template_file"`
	TTLAfterFinished *int32            `yaml:"ttl_after_finished"`
	MaxJobsPerMinute int               `yaml:"max_jobs_per_minute"`
	PollInterval     time.Duration     `yaml:"poll_interval"`
	LogTailLines     int64             `yaml:"log_tail_lines"`
	Kubeconfig       string            `yaml:"kubeconfig"`
	Context          string            `yaml:"context"`
}

// Resources are a container's resource requests and limits, as quantities
// ("500m", "2Gi").
type Resources struct {
	Requests map[string]string `yaml:"requests" json:"requests,omitempty"`
	Limits   map[string]string `yaml:"limits" json:"limits,omitempty"`
}

// DecodeSection decodes the raw kubernetes: node of the controller section
// strictly (an unknown field is an error naming it).
func DecodeSection(n yaml.Node) (Section, error) {
	var s Section
	if n.Kind == 0 {
		return s, nil
	}
	b, err := yaml.Marshal(&n)
	if err != nil {
		return s, fmt.Errorf("controller.kubernetes: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil && !errors.Is(err, io.EOF) {
		return s, fmt.Errorf("controller.kubernetes: %w", err)
	}
	return s, nil
}

// Options returns the backend options the section describes, without the
// client. A relative job_template_file is resolved against base (the
// config file's directory).
func (s Section) Options(base string) (Options, error) {
	o := Options{
		Namespace: s.Namespace, GatewayURL: s.GatewayURL, TTLAfterFinished: s.TTLAfterFinished,
		MaxJobsPerMinute: s.MaxJobsPerMinute, PollInterval: s.PollInterval, LogTailLines: s.LogTailLines,
		Values: Values{
			Image: s.Image, ImagePullPolicy: s.ImagePullPolicy, ServiceAccount: s.ServiceAccount, WorkingDir: s.WorkingDir,
			Labels: s.Labels, Annotations: s.Annotations, NodeSelector: s.NodeSelector, Resources: s.Resources,
		},
	}
	text, name := s.JobTemplate, "job_template"
	if s.JobTemplateFile != "" {
		if s.JobTemplate != "" {
			return o, errors.New("controller.kubernetes: set job_template or job_template_file, not both")
		}
		p := s.JobTemplateFile
		if base != "" && !filepath.IsAbs(p) {
			p = filepath.Join(base, p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return o, fmt.Errorf("controller.kubernetes: job_template_file: %w", err)
		}
		text, name = string(b), filepath.Base(p)
	}
	if text != "" {
		t, err := ParseTemplate(name, text)
		if err != nil {
			return o, err
		}
		o.Template = t
	} else if s.Image == "" {
		return o, errors.New("controller.kubernetes: set image (or a job_template / job_template_file)")
	}
	return o, nil
}

// ParseTemplate parses a Job manifest template (Go text/template over
// TemplateData, with the function json).
func ParseTemplate(name, text string) (*template.Template, error) {
	t, err := template.New(name).Option("missingkey=error").Funcs(funcs).Parse(text)
	if err != nil {
		return nil, fmt.Errorf("controller.kubernetes: job template: %w", err)
	}
	return t, nil
}

// Client connects to the cluster: the kubeconfig when one is named (or
// $KUBECONFIG is set), else the in-cluster service account, else
// ~/.kube/config.
func (s Section) Client() (Client, error) {
	cfg, err := s.restConfig()
	if err != nil {
		return nil, err
	}
	// rest.HTTPClientFor once, shared by both typed clients (as
	// kubernetes.NewForConfig does).
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("controller.kubernetes: client: %w", err)
	}
	batch, err := batchclient.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, fmt.Errorf("controller.kubernetes: client: %w", err)
	}
	core, err := coreclient.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, fmt.Errorf("controller.kubernetes: client: %w", err)
	}
	return clients{batch, core}, nil
}

// clients are the two typed clients the backend uses.
type clients struct {
	batch batchclient.BatchV1Interface
	core  coreclient.CoreV1Interface
}

func (c clients) BatchV1() batchclient.BatchV1Interface { return c.batch }
func (c clients) CoreV1() coreclient.CoreV1Interface    { return c.core }

func (s Section) restConfig() (*rest.Config, error) {
	path := s.Kubeconfig
	if path == "" && os.Getenv("KUBECONFIG") == "" {
		if cfg, err := rest.InClusterConfig(); err == nil {
			return cfg, nil
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		if len(path) > 1 && path[:2] == "~/" {
			if home, err := os.UserHomeDir(); err == nil {
				path = filepath.Join(home, path[2:])
			}
		}
		rules.ExplicitPath = path
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: s.Context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		where := path
		if where == "" {
			where = "$KUBECONFIG or ~/.kube/config (and not running in a cluster)"
		}
		return nil, fmt.Errorf("controller.kubernetes: no cluster config from %s: %w", where, err)
	}
	return cfg, nil
}

package kubernetes_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/aglrl/agl/controller"
	"github.com/aglrl/agl/store"
)

// TestRealAPIServer runs the backend against a real kube-apiserver (and
// etcd) started by envtest from the binaries in $KUBEBUILDER_ASSETS. That
// server runs no Job controller or kubelet: the test's cluster plays them,
// as on the fake clientset, but every Job, pod and status write passes the
// real API server's validation.
func TestRealAPIServer(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("KUBEBUILDER_ASSETS is not set: no envtest binaries (etcd, kube-apiserver) to start a real API server; install them (setup-envtest use -p path) and set KUBEBUILDER_ASSETS to run this test")
	}
	te := &envtest.Environment{}
	rc, err := te.Start()
	if err != nil {
		t.Fatalf("envtest: %v", err)
	}
	t.Cleanup(func() { te.Stop() })
	cs, err := k8s.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No controller-manager creates the default service account.
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	g := newGateway(t)
	cl := newCluster(t, cs)
	ok := g.create(t, 1, store.RolloutConfig{}, `{"case":"succeed","reward":0.5}`)[0]
	bad := g.create(t, 1, store.RolloutConfig{}, `{"case":"fail"}`)[0]
	hang := g.create(t, 1, store.RolloutConfig{TimeoutSeconds: 2}, `{"case":"hang"}`)[0]
	r := serve(t, g, controller.Config{Concurrency: 3}, opts(cs))
	for id, want := range map[string]store.RolloutStatus{ok: store.RolloutSucceeded, bad: store.RolloutFailed, hang: store.RolloutFailed} {
		got := g.waitTerminal(t, id, 60*time.Second)
		if got.Status != want {
			t.Errorf("rollout %s: %s %q, want %s", id, got.Status, got.Error, want)
		}
	}
	r.stop(t)
	if got := g.rollout(t, ok); got.Reward == nil || *got.Reward != 0.5 {
		t.Errorf("reward %v, want 0.5 (the termination message)", got.Reward)
	}
	if msg := attemptError(g.rollout(t, hang)); !strings.HasPrefix(msg, "timeout: job ") {
		t.Errorf("timed-out attempt's error %q", msg)
	}
	hangJob := ""
	for _, n := range cl.created() {
		if j := cl.job(n); j.Annotations["agl.dev/rollout-id"] == hang {
			hangJob = n
		}
	}
	if _, err := cs.BatchV1().Jobs(ns).Get(ctx, hangJob, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("timed-out job %q: %v, want deleted", hangJob, err)
	}
}

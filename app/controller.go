package app

import (
	"github.com/aglrl/agl/controller"
	"github.com/aglrl/agl/controller/kubernetes"
)

// KubernetesBackend builds the Jobs backend of a kind: kubernetes section:
// its options, then the cluster client (kubeconfig or in-cluster).
func KubernetesBackend(sec controller.Section, base string) (*kubernetes.Backend, error) {
	ks, err := kubernetes.DecodeSection(sec.Kubernetes)
	if err != nil {
		return nil, err
	}
	o, err := ks.Options(base)
	if err != nil {
		return nil, err
	}
	if o.Client, err = ks.Client(); err != nil {
		return nil, err
	}
	return kubernetes.New(o)
}

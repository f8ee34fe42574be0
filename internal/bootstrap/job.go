package bootstrap

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// Where a bootstrap Job finds the member's kubeconfig.
const (
	KubeconfigDir  = "/var/run/kobe"
	KubeconfigKey  = "kubeconfig"
	KubeconfigPath = KubeconfigDir + "/" + KubeconfigKey
	// DefaultJobTimeout is a Job bundle's timeout when it sets none (the
	// CRD defaults it too).
	DefaultJobTimeout = 10 * time.Minute
)

// JobsRefusal says why an operator cannot run the Job bundles of a pool of
// backend t, or "" when it can. enabled is --bootstrap-jobs: the host
// cluster has nodes to run them. The Job runs in the host cluster, so only
// members whose API server pods of the host reach qualify: the kubernetes
// backend's (a local member listens on the operator's loopback). The pool
// says the reason in its conditions; a member fails on it.
func JobsRefusal(enabled bool, t kobev1.BackendType) string {
	switch {
	case !enabled:
		return "this operator does not run (its host cluster has no nodes to run them: --bootstrap-jobs is off)"
	case t != kobev1.BackendKubernetes:
		return fmt.Sprintf("runs in the host cluster, whose pods cannot reach a %s member's API server (only kubernetes backend members)", t)
	}
	return ""
}

// JobMember is what a bootstrap Job is made for: the ClusterInstance Name
// and UID, which own the Job and its Secret.
type JobMember struct {
	Member
	UID types.UID
	// Kubeconfig is the member's admin kubeconfig, whose server pods of the
	// host cluster reach.
	Kubeconfig []byte
}

// JobName is the name of the Job (and of its kubeconfig Secret) that runs
// bundle bc, in the version digest, for member uid: a new version of the
// bundle is a new Job.
func JobName(uid types.UID, bundle, digest string) string {
	sum := sha256.Sum256([]byte(string(uid) + "/" + bundle + "/" + digest))
	return "kobe-boot-" + hex.EncodeToString(sum[:8])
}

// RenderJob renders the Job that runs Job bundle bc against member m, and
// the Secret holding the member's kubeconfig it mounts. References in the
// command, the arguments and the image are substituted as in manifests
// (vals, from Resolve); each parameter is also in the environment as
// KOBE_PARAM_<NAME>, beside KUBECONFIG, KOBE_MEMBER, KOBE_MEMBER_NAMESPACE
// and KOBE_POOL. The pod gets no ServiceAccount token (it works on the
// member, never on the host cluster) and is never restarted: a failed run
// fails the member. The member's ClusterInstance owns the Job and the
// Secret, so the garbage collector removes them with it whatever becomes
// of the operator.
func RenderJob(bc *kobev1.BootstrapConfig, digest string, m JobMember, vals Values) (*batchv1.Job, *corev1.Secret, error) {
	spec := bc.Spec.Job
	if spec == nil {
		return nil, nil, fmt.Errorf("BootstrapConfig %s runs no Job", bc.Name)
	}
	expandAll := func(in []string) ([]string, error) {
		out := make([]string, len(in))
		for i, s := range in {
			v, err := expand(s, vals)
			if err != nil {
				return nil, &InvalidError{Source: bc.Name + "/job", Err: err}
			}
			out[i] = v
		}
		return out, nil
	}
	image, err := expandAll([]string{spec.Image})
	if err != nil {
		return nil, nil, err
	}
	command, err := expandAll(spec.Command)
	if err != nil {
		return nil, nil, err
	}
	args, err := expandAll(spec.Args)
	if err != nil {
		return nil, nil, err
	}
	timeout := DefaultJobTimeout
	if spec.Timeout != nil && spec.Timeout.Duration > 0 {
		timeout = spec.Timeout.Duration
	}
	env := []corev1.EnvVar{
		{Name: "KUBECONFIG", Value: KubeconfigPath},
		{Name: "KOBE_MEMBER", Value: m.Name},
		{Name: "KOBE_MEMBER_NAMESPACE", Value: m.Namespace},
		{Name: "KOBE_POOL", Value: m.Pool},
	}
	var params []string
	for k := range vals {
		if name, ok := strings.CutPrefix(k, "params."); ok {
			params = append(params, name)
		}
	}
	slices.Sort(params)
	for _, p := range params {
		env = append(env, corev1.EnvVar{Name: "KOBE_PARAM_" + p, Value: vals["params."+p]})
	}
	name := JobName(m.UID, bc.Name, digest)
	labels := map[string]string{kobev1.LabelMemberUID: string(m.UID), kobev1.LabelBootstrap: bc.Name}
	if len(m.Name) <= 63 {
		labels[kobev1.LabelInstance] = m.Name
	}
	meta := metav1.ObjectMeta{Name: name, Namespace: m.Namespace, Labels: labels, OwnerReferences: []metav1.OwnerReference{{
		APIVersion: kobev1.GroupVersion.String(), Kind: "ClusterInstance", Name: m.Name, UID: m.UID, Controller: ptr.To(true),
	}}}
	secret := &corev1.Secret{ObjectMeta: *meta.DeepCopy(), Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{KubeconfigKey: m.Kubeconfig}}
	job := &batchv1.Job{
		ObjectMeta: meta,
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr.To[int32](0),
			ActiveDeadlineSeconds: ptr.To(int64(timeout.Seconds())),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{kobev1.LabelBootstrapFor: string(m.UID), kobev1.LabelBootstrap: bc.Name}},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					Containers: []corev1.Container{{
						Name: "bootstrap", Image: image[0], Command: command, Args: args, Env: env,
						ImagePullPolicy: corev1.PullIfNotPresent,
						VolumeMounts:    []corev1.VolumeMount{{Name: "kubeconfig", MountPath: KubeconfigDir, ReadOnly: true}},
					}},
					// Readable by whatever user the image runs as: the volume
					// is this pod's alone.
					Volumes: []corev1.Volume{{Name: "kubeconfig", VolumeSource: corev1.VolumeSource{
						Secret: &corev1.SecretVolumeSource{SecretName: name, DefaultMode: ptr.To[int32](0o444)}}}},
				},
			},
		},
	}
	return job, secret, nil
}

// JobOutcome reads a bootstrap Job's status: done when it completed, a
// non-empty failure when it failed (why, for the member's condition).
func JobOutcome(j *batchv1.Job) (done bool, failure string) {
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return true, ""
		case batchv1.JobFailed, batchv1.JobFailureTarget:
			return false, strings.TrimSpace(c.Reason + ": " + c.Message)
		}
	}
	return false, ""
}

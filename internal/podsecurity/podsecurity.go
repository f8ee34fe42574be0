package podsecurity

import (
	"fmt"
	"regexp"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/node"
)

const (
	// PolicyFile is the static policies' file name in the manifests
	// directory (the API server loads every manifest of that directory).
	PolicyFile = "pod-security.yaml"
	// NamespacePolicy refuses namespace labels that would lower the
	// member's level. The suffix marks policies loaded from files.
	NamespacePolicy = "kobe-pod-security.static.k8s.io"
	// PodPolicy refuses pods that Pod Security baseline forbids, whatever
	// their namespace's labels say.
	PodPolicy = "kobe-pod-baseline.static.k8s.io"
	// VolumePolicy refuses PersistentVolumes that name the node's files:
	// local volumes, and hostPath volumes outside node.StorageRoot.
	VolumePolicy = "kobe-persistent-volumes.static.k8s.io"
	// NetworkVolumePolicy refuses pods and PersistentVolumes whose volumes
	// the node mounts from the network or attaches from outside the
	// member, unless the pool's cluster.networkVolumes is Allowed.
	NetworkVolumePolicy = "kobe-network-volumes.static.k8s.io"
)

const (
	enforceLabel        = "pod-security.kubernetes.io/enforce"
	enforceVersionLabel = "pod-security.kubernetes.io/enforce-version"
)

// stricter are the enforce labels a namespace may carry at each level; nil
// at privileged, where nothing is kept.
var stricter = map[kobev1.PodSecurityLevel][]string{
	kobev1.PodSecurityPrivileged: nil,
	kobev1.PodSecurityBaseline:   {"baseline", "restricted"},
	kobev1.PodSecurityRestricted: {"restricted"},
}

// Render returns the API server's admission configuration for member
// cluster c and the static policies it loads from manifestsDir (an absolute
// path, where the caller writes policies as PolicyFile). PodSecurity
// enforces, audits and warns at c's level in every namespace with no
// exemption. Below privileged, NamespacePolicy keeps namespaces at the level
// on every write path (create, update, patch and apply, and the status and
// finalize subresources, which PodSecurity itself does not check),
// PodPolicy refuses what baseline forbids even if a namespace's labels were
// lowered, and VolumePolicy refuses PersistentVolumes that would mount the
// node's files into a pod (which Pod Security never sees). At every level,
// privileged included, NetworkVolumePolicy refuses network volumes unless
// c.NetworkVolumes is Allowed (at privileged it keeps pools to what they
// asked for but is no boundary: a privileged pod mounts what it likes).
// policies is nil when there is none (a
// privileged member whose pool allows network volumes).
func Render(c kobev1.ClusterTemplate, manifestsDir string) (config, policies []byte, err error) {
	return render(c, manifestsDir, false)
}

// RenderShared is Render for an API server that loads other static
// policies from manifestsDir too (the member address guard): the
// ValidatingAdmissionPolicy plugin reads the directory whatever Render
// puts there, so the caller must always create it.
func RenderShared(c kobev1.ClusterTemplate, manifestsDir string) (config, policies []byte, err error) {
	return render(c, manifestsDir, true)
}

func render(c kobev1.ClusterTemplate, manifestsDir string, shared bool) (config, policies []byte, err error) {
	level := c.EffectivePodSecurity()
	allowed, known := stricter[level]
	if !known {
		return nil, nil, fmt.Errorf("spec.cluster.podSecurity %q: want privileged, baseline or restricted", level)
	}
	var objs []any
	if allowed != nil {
		objs = append(objs,
			namespacePolicy(string(level), allowed), binding(NamespacePolicy),
			podPolicy(), binding(PodPolicy),
			volumePolicy(), binding(VolumePolicy))
	}
	switch c.NetworkVolumes {
	case "", kobev1.NetworkVolumesRefused:
		objs = append(objs, networkVolumePolicy(), binding(NetworkVolumePolicy))
	case kobev1.NetworkVolumesAllowed:
	default:
		return nil, nil, fmt.Errorf("spec.cluster.networkVolumes %q: want %s or %s", c.NetworkVolumes, kobev1.NetworkVolumesRefused, kobev1.NetworkVolumesAllowed)
	}
	l := string(level)
	plugins := []any{map[string]any{
		"name": "PodSecurity",
		"configuration": map[string]any{
			"apiVersion": "pod-security.admission.config.k8s.io/v1",
			"kind":       "PodSecurityConfiguration",
			"defaults": map[string]string{
				"enforce": l, "enforce-version": "latest",
				"audit": l, "audit-version": "latest",
				"warn": l, "warn-version": "latest",
			},
			"exemptions": map[string][]string{"usernames": {}, "runtimeClasses": {}, "namespaces": {}},
		},
	}}
	if objs != nil || shared {
		if !strings.HasPrefix(manifestsDir, "/") {
			return nil, nil, fmt.Errorf("static manifests directory %q: want an absolute path", manifestsDir)
		}
		plugins = append(plugins, map[string]any{
			"name": "ValidatingAdmissionPolicy",
			"configuration": map[string]any{
				"apiVersion":         "apiserver.config.k8s.io/v1",
				"kind":               "ValidatingAdmissionPolicyConfiguration",
				"staticManifestsDir": manifestsDir,
			},
		})
	}
	if objs != nil {
		if policies, err = marshalAll(objs...); err != nil {
			return nil, nil, err
		}
	}
	config, err = yaml.Marshal(map[string]any{
		"apiVersion": "apiserver.config.k8s.io/v1",
		"kind":       "AdmissionConfiguration",
		"plugins":    plugins,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("rendering the admission configuration: %w", err)
	}
	return config, policies, nil
}

func marshalAll(objs ...any) ([]byte, error) {
	docs := make([]string, len(objs))
	for i, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("rendering the static admission policies: %w", err)
		}
		docs[i] = string(b)
	}
	return []byte(strings.Join(docs, "---\n")), nil
}

func policy(name string, rules []admissionv1.NamedRuleWithOperations, variables []admissionv1.Variable, validations []admissionv1.Validation) *admissionv1.ValidatingAdmissionPolicy {
	return &admissionv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: rules},
			Variables:        variables,
			Validations:      validations,
		},
	}
}

func binding(name string) *admissionv1.ValidatingAdmissionPolicyBinding {
	return &admissionv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
}

// coreRule matches resources of the core group on create and update
// (patch and server-side apply arrive as one of them).
func coreRule(resources ...string) admissionv1.NamedRuleWithOperations {
	return admissionv1.NamedRuleWithOperations{RuleWithOperations: admissionv1.RuleWithOperations{
		Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
		Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: resources},
	}}
}

// namespacePolicy refuses namespaces whose enforce label is not one of
// allowed, or whose enforce-version is not "latest". A rule on
// "namespaces" alone leaves out its subresources, which persist labels
// too.
func namespacePolicy(level string, allowed []string) *admissionv1.ValidatingAdmissionPolicy {
	return policy(NamespacePolicy,
		[]admissionv1.NamedRuleWithOperations{coreRule("namespaces", "namespaces/*")},
		[]admissionv1.Variable{{Name: "labels", Expression: "object.metadata.?labels.orValue({})"}},
		[]admissionv1.Validation{
			{
				Expression: fmt.Sprintf("!(%q in variables.labels) || variables.labels[%q] in %s", enforceLabel, enforceLabel, celList(allowed)),
				Message:    fmt.Sprintf("this member enforces Pod Security %s: a namespace's %s label may only be %s", level, enforceLabel, strings.Join(allowed, " or ")),
				Reason:     ptr.To(metav1.StatusReasonForbidden),
			},
			{
				Expression: fmt.Sprintf("!(%q in variables.labels) || variables.labels[%q] == 'latest'", enforceVersionLabel, enforceVersionLabel),
				Message:    fmt.Sprintf("this member enforces Pod Security %s at version latest: a namespace's %s label may only be latest", level, enforceVersionLabel),
				Reason:     ptr.To(metav1.StatusReasonForbidden),
			},
		})
}

// What Pod Security baseline allows (pod-security-admission's baseline
// checks, version latest as of Kubernetes 1.37).
var (
	baselineCapabilities = []string{"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
		"NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
	baselineSysctls = []string{"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
		"net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start", "net.ipv4.ip_local_reserved_ports",
		"net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
		"net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
		"net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_notsent_lowat"}
	baselineSELinuxTypes = []string{"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
	baselineProfiles     = []string{"RuntimeDefault", "Localhost"}
)

// podCheck is one rule of PodPolicy: offenders is a CEL expression giving
// the names of what breaks it (containers, volumes, fields), message says
// which field is wrong and is followed by the offenders.
type podCheck struct{ name, offenders, message string }

// containers names the containers (init and ephemeral included) for which
// bad, a CEL condition on c, holds.
func containers(bad string) string {
	return fmt.Sprintf("variables.containers.filter(c, %s).map(c, 'container ' + c.name)", bad)
}

// securityContexts names the pod's and containers' security contexts whose
// field (an optional chain such as ".?seccompProfile.?type") is bad; bad
// formats the CEL condition on that optional value.
func securityContexts(field string, bad func(opt string) string) string {
	return fmt.Sprintf("(%s ? ['spec.securityContext'] : []) + %s",
		bad("object.spec.?securityContext"+field), containers(bad("c.?securityContext"+field)))
}

func celList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = "'" + s + "'"
	}
	return "[" + strings.Join(q, ", ") + "]"
}

var podChecks = []podCheck{
	{"privileged", containers("c.?securityContext.?privileged.orValue(false)"),
		"privileged containers are forbidden (securityContext.privileged)"},
	// Before hostNamespaces: a host process pod must use the host's
	// network, and only the first refusal is reported.
	{"hostProcess", securityContexts(".?windowsOptions.?hostProcess", func(o string) string { return o + ".orValue(false)" }),
		"Windows host processes are forbidden (windowsOptions.hostProcess)"},
	{"hostNamespaces", "(object.spec.?hostNetwork.orValue(false) ? ['spec.hostNetwork'] : []) + " +
		"(object.spec.?hostPID.orValue(false) ? ['spec.hostPID'] : []) + " +
		"(object.spec.?hostIPC.orValue(false) ? ['spec.hostIPC'] : [])",
		"sharing the host's namespaces is forbidden"},
	{"hostPath", "object.spec.?volumes.orValue([]).filter(v, has(v.hostPath)).map(v, 'volume ' + v.name)",
		"hostPath volumes are forbidden (spec.volumes[*].hostPath)"},
	{"hostPorts", containers("c.?ports.orValue([]).exists(p, p.?hostPort.orValue(0) != 0)"),
		"host ports are forbidden (ports[*].hostPort)"},
	{"capabilities", "variables.containers.filter(c, c.?securityContext.?capabilities.?add.orValue([]).exists(a, !(a in " + celList(baselineCapabilities) + ")))" +
		".map(c, 'container ' + c.name + ' adds ' + c.securityContext.capabilities.add.filter(a, !(a in " + celList(baselineCapabilities) + ")).join(' '))",
		"capabilities beyond Pod Security baseline are forbidden (securityContext.capabilities.add; allowed: " + strings.Join(baselineCapabilities, " ") + ")"},
	{"procMount", containers("c.?securityContext.?procMount.orValue('Default') != 'Default'"),
		"securityContext.procMount must be Default"},
	{"seccomp", securityContexts(".?seccompProfile.?type", func(o string) string {
		return fmt.Sprintf("!(%s.orValue('RuntimeDefault') in %s)", o, celList(baselineProfiles))
	}), "seccompProfile.type must be RuntimeDefault or Localhost (Unconfined is forbidden)"},
	{"appArmor", securityContexts(".?appArmorProfile.?type", func(o string) string {
		return fmt.Sprintf("!(%s.orValue('RuntimeDefault') in %s)", o, celList(baselineProfiles))
	}) + " + object.metadata.?annotations.orValue({}).filter(k, k.startsWith('container.apparmor.security.beta.kubernetes.io/') && " +
		"!(object.metadata.annotations[k] in ['', 'runtime/default'] || object.metadata.annotations[k].startsWith('localhost/'))).map(k, 'annotation ' + k)",
		"AppArmor must be RuntimeDefault or Localhost (appArmorProfile.type; container.apparmor.security.beta.kubernetes.io annotations: runtime/default or localhost/*)"},
	{"sysctls", "object.spec.?securityContext.?sysctls.orValue([]).filter(s, !(s.name in " + celList(baselineSysctls) + ")).map(s, s.name)",
		"unsafe sysctls are forbidden (spec.securityContext.sysctls)"},
	{"seLinux", securityContexts(".?seLinuxOptions", func(o string) string {
		return fmt.Sprintf("(!(%[1]s.?type.orValue('') in %[2]s) || %[1]s.?user.orValue('') != '' || %[1]s.?role.orValue('') != '')", o, celList(baselineSELinuxTypes))
	}), "seLinuxOptions may set no user or role, and type only to container_t, container_init_t, container_kvm_t or container_engine_t"},
	{"probeHosts", containers("[?c.?livenessProbe, ?c.?readinessProbe, ?c.?startupProbe, ?c.?lifecycle.?postStart, ?c.?lifecycle.?preStop]" +
		".exists(h, h.?httpGet.?host.orValue('') != '' || h.?tcpSocket.?host.orValue('') != '')"),
		"probes and lifecycle handlers may not name a host (httpGet.host, tcpSocket.host)"},
}

// podPolicy refuses, in every namespace, pods and ephemeral containers
// that Pod Security baseline forbids: a namespace whose labels were lowered
// still cannot run a pod that owns the node.
func podPolicy() *admissionv1.ValidatingAdmissionPolicy {
	vars := []admissionv1.Variable{{Name: "containers", Expression: "object.spec.?containers.orValue([]) + " +
		"object.spec.?initContainers.orValue([]) + object.spec.?ephemeralContainers.orValue([])"}}
	var validations []admissionv1.Validation
	for _, c := range podChecks {
		vars = append(vars, admissionv1.Variable{Name: c.name, Expression: c.offenders})
		prefix := "this member enforces Pod Security baseline on every pod: " + c.message
		validations = append(validations, admissionv1.Validation{
			Expression:        fmt.Sprintf("size(variables.%s) == 0", c.name),
			Message:           prefix,
			MessageExpression: fmt.Sprintf("%q + ': ' + variables.%s.join(', ')", prefix, c.name),
			Reason:            ptr.To(metav1.StatusReasonForbidden),
		})
	}
	return policy(PodPolicy, []admissionv1.NamedRuleWithOperations{coreRule("pods", "pods/ephemeralcontainers")}, vars, validations)
}

// volumeDirPattern matches the only hostPath a PersistentVolume may name: a
// direct child of node.StorageRoot whose name is a DNS subdomain-like
// label (so never ".", "..", empty, nested or with a trailing slash).
var volumeDirPattern = "^" + regexp.QuoteMeta(node.StorageRoot) + "/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"

// volumeHostPathTypes are the hostPath types a PersistentVolume may set:
// all of them are a directory (unset skips kubelet's check, which the path
// rule makes harmless).
var volumeHostPathTypes = []string{"", "Directory", "DirectoryOrCreate"}

// volumePolicy refuses PersistentVolumes that a pod could use to mount the
// node's files, which PodPolicy cannot see through a claim: local volumes,
// and hostPath volumes other than a directory directly under
// node.StorageRoot (where the node-local provisioner puts them). The root
// itself is refused too: a pod that mounted it could plant a symlink that
// a later volume's path follows out of it.
func volumePolicy() *admissionv1.ValidatingAdmissionPolicy {
	const prefix = "this member lets PersistentVolumes name no file of the node: "
	return policy(VolumePolicy, []admissionv1.NamedRuleWithOperations{coreRule("persistentvolumes")}, nil,
		[]admissionv1.Validation{
			{
				Expression: "!has(object.spec.local)",
				Message:    prefix + "local volumes are forbidden (spec.local); the default StorageClass provisions node-local volumes",
				Reason:     ptr.To(metav1.StatusReasonForbidden),
			},
			{
				Expression: fmt.Sprintf("!has(object.spec.hostPath) || object.spec.hostPath.path.matches(%q)", volumeDirPattern),
				Message:    fmt.Sprintf("%shostPath volumes may only name a directory directly under %s (spec.hostPath.path must match %s)", prefix, node.StorageRoot, volumeDirPattern),
				Reason:     ptr.To(metav1.StatusReasonForbidden),
			},
			{
				Expression: fmt.Sprintf("!has(object.spec.hostPath) || object.spec.hostPath.?type.orValue('') in %s", celList(volumeHostPathTypes)),
				Message:    prefix + "a hostPath volume's type may only be Directory or DirectoryOrCreate, or unset (spec.hostPath.type)",
				Reason:     ptr.To(metav1.StatusReasonForbidden),
			},
		})
}

// networkVolumeSources are the volume sources NetworkVolumePolicy refuses
// (the same field names in a pod's spec.volumes[*] and a PersistentVolume's
// spec): every in-tree source whose storage the node's kernel mounts from
// the network (nfs, cephfs, glusterfs, quobyte, azureFile), attaches from
// outside the member as a block device (iscsi, rbd, fc, the clouds' disks,
// portworx, scaleIO, storageos, flocker), or fetches with the node's own
// tools (flexVolume runs a driver binary of the node; gitRepo makes kubelet
// run git in the node's network). A hung hard mount leaves processes that
// nothing can kill, and the node, not a pod, makes the connections.
//
// Admitted: what the node builds from API objects or its own disk
// (emptyDir, configMap, secret, downwardAPI, projected; hostPath and local
// are PodPolicy's and VolumePolicy's), claims (persistentVolumeClaim,
// ephemeral: the PersistentVolume they bind to passes this policy), image
// (pulled like a container's image), and csi, inline or in a
// PersistentVolume: a CSI driver's node plugin is a pod of the member, and
// one that mounts needs privileged containers (Bidirectional mount
// propagation), which Pod Security baseline refuses; a member has none
// unless its holder runs one, which only a privileged member allows, and
// privileged trusts the holder with the node.
var networkVolumeSources = []string{
	"nfs", "iscsi", "cephfs", "rbd", "glusterfs", "fc", "flexVolume", "quobyte", "storageos", "portworxVolume",
	"scaleIO", "flocker", "azureFile", "azureDisk", "gcePersistentDisk", "awsElasticBlockStore", "cinder",
	"vsphereVolume", "photonPersistentDisk", "gitRepo",
}

// networkSource is a CEL expression giving the first of
// networkVolumeSources that the volume source x has, or the empty string.
func networkSource(x string) string {
	var b strings.Builder
	for _, s := range networkVolumeSources {
		fmt.Fprintf(&b, "has(%s.%s) ? '%s' : ", x, s, s)
	}
	b.WriteString("''")
	return b.String()
}

// networkVolumePolicy refuses pods with a volume of networkVolumeSources
// and PersistentVolumes of one (create and update, patch and apply
// included). Pods are checked as such, whoever makes them: a controller's
// pods pass through it as the holder's own do, and a claim's volume is
// checked as a PersistentVolume. Ephemeral containers add no volume.
func networkVolumePolicy() *admissionv1.ValidatingAdmissionPolicy {
	const (
		prefix = "this member refuses network volumes (storage its nodes would mount or attach from outside the member)"
		suffix = "the pool's spec.cluster.networkVolumes is Refused (set it to Allowed to use them)"
	)
	return policy(NetworkVolumePolicy, []admissionv1.NamedRuleWithOperations{coreRule("pods", "persistentvolumes")},
		[]admissionv1.Variable{
			{Name: "persistentVolumeSource", Expression: "request.resource.resource == 'persistentvolumes' ? (" + networkSource("object.spec") + ") : ''"},
			{Name: "offenders", Expression: "variables.persistentVolumeSource != '' ? " +
				"[variables.persistentVolumeSource + ' (spec.' + variables.persistentVolumeSource + ')'] : " +
				"object.spec.?volumes.orValue([]).filter(v, (" + networkSource("v") + ") != '').map(v, (" + networkSource("v") + ") + ' (volume ' + v.name + ')')"},
		},
		[]admissionv1.Validation{{
			Expression:        "size(variables.offenders) == 0",
			Message:           fmt.Sprintf("%s, %s: %s", prefix, strings.Join(networkVolumeSources, ", "), suffix),
			MessageExpression: fmt.Sprintf("%q + ': ' + variables.offenders.join(', ') + '; ' + %q", prefix, suffix),
			Reason:            ptr.To(metav1.StatusReasonForbidden),
		}})
}

// MinKubernetesMinor is the oldest Kubernetes minor (1.x) a member may run:
// before 1.36 the API server cannot load admission policies from files
// (staticManifestsDir), and policies made through the API are the lease
// holder's to delete.
const MinKubernetesMinor = 36

// APIServerFlags are the flags a member's API server of Kubernetes version
// v (x.y.z, with or without a leading v) needs to load what Render writes:
// 1.36 has static admission manifests behind an alpha feature gate (on by
// default from 1.37). A version below MinKubernetesMinor is an error that
// says why.
func APIServerFlags(v string) ([]string, error) {
	var major, minor, patch int
	if _, err := fmt.Sscanf(strings.TrimPrefix(v, "v"), "%d.%d.%d", &major, &minor, &patch); err != nil || major != 1 {
		return nil, fmt.Errorf("version %q is no Kubernetes version: want 1.x.y", v)
	}
	switch {
	case minor < MinKubernetesMinor:
		return nil, fmt.Errorf("version %s of Kubernetes cannot load the static admission policies that keep a lease holder off the member's nodes (staticManifestsDir, from 1.%d): a member runs 1.%d or newer", v, MinKubernetesMinor, MinKubernetesMinor)
	case minor == MinKubernetesMinor:
		return []string{"--feature-gates=ManifestBasedAdmissionControlConfig=true"}, nil
	}
	return nil, nil
}

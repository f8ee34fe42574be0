package pool

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// MemberName is the name of a pool's member with the given ordinal.
func MemberName(pool string, ordinal int32) string {
	return fmt.Sprintf("pool-%s-%d", pool, ordinal)
}

// IsMemberName reports whether name is MemberName(pool, n) for some
// ordinal n: "pool-dev-3" is dev's, never "pool-dev-x-3"'s.
func IsMemberName(pool, name string) bool {
	rest, ok := strings.CutPrefix(name, "pool-"+pool+"-")
	if !ok {
		return false
	}
	_, err := strconv.ParseUint(rest, 10, 31)
	return err == nil
}

// TemplateHash identifies what a pool's members are built from (backend,
// cluster template, and the bootstraps and snapshot when set), without the
// content of the bootstraps; see TemplateHashWith.
func TemplateHash(spec *kobev1.ClusterPoolSpec) string { return TemplateHashWith(spec, nil) }

// TemplateHashWith identifies what a pool's members are built from:
// backend (with its nodes resolved: see Decide), cluster template, the bootstraps and snapshot when set, and the
// content of the bootstraps (bundles: BundleDigest by name; a bundle that
// does not exist is left out). A member whose hash differs was built from
// an older template. The optional parts are omitted when unset, so that
// adding them to the hash changed no existing pool's hash (which would have
// rolled every member out).
func TemplateHashWith(spec *kobev1.ClusterPoolSpec, bundles map[string]string) string {
	var content []string
	for _, b := range spec.Bootstraps {
		if d, ok := bundles[b.Name]; ok {
			content = append(content, b.Name+"="+d)
		}
	}
	data, err := json.Marshal(struct {
		Backend    kobev1.BackendSpec     `json:"backend"`
		Cluster    kobev1.ClusterTemplate `json:"cluster"`
		Bootstraps []kobev1.BootstrapRef  `json:"bootstraps,omitempty"`
		Snapshot   *kobev1.SnapshotSpec   `json:"snapshot,omitempty"`
		Content    []string               `json:"bootstrapContent,omitempty"`
	}{withoutZeroNodes(spec.Backend), spec.Cluster, spec.Bootstraps, spec.Snapshot, content})
	if err != nil {
		panic(fmt.Sprintf("encoding a pool template: %v", err)) // plain structs always encode
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// withoutZeroNodes is b with a nodes field of 0 unset: both build the same
// API-only member, and before nodes had a default a 0 was never written,
// so a pool that now says `nodes: 0` keeps its members.
func withoutZeroNodes(b kobev1.BackendSpec) kobev1.BackendSpec {
	if f := nodesField(b); f == nil || *f != 0 {
		return b
	}
	out := *b.DeepCopy()
	if out.Local != nil {
		out.Local.Nodes = nil
	}
	if out.Kubernetes != nil {
		out.Kubernetes.Nodes = nil
	}
	return out
}

// BundleDigest identifies a BootstrapConfig's content: a change to it is a
// change of the template of every pool that names the bundle.
func BundleDigest(bc *kobev1.BootstrapConfig) string {
	data, err := json.Marshal(bc.Spec)
	if err != nil {
		panic(fmt.Sprintf("encoding a BootstrapConfig: %v", err)) // plain structs always encode
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// NewMember renders the ClusterInstance for a pool's member: labelled with
// the pool, controlled by it, its spec copied from the pool's template
// (whose hash is templateHash: TemplateHashWith the pool's bundles), and
// already carrying the destroy finalizer so that no window exists in which
// the member could be created without it.
func NewMember(p *kobev1.ClusterPool, ordinal int32, templateHash string) *kobev1.ClusterInstance {
	return &kobev1.ClusterInstance{
		ObjectMeta: metav1.ObjectMeta{
			Name:       MemberName(p.Name, ordinal),
			Namespace:  p.Namespace,
			Labels:     map[string]string{kobev1.LabelPool: p.Name},
			Finalizers: []string{kobev1.FinalizerInstance},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         kobev1.GroupVersion.String(),
				Kind:               "ClusterPool",
				Name:               p.Name,
				UID:                p.UID,
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: kobev1.ClusterInstanceSpec{
			PoolRef:      kobev1.ObjectRef{Name: p.Name, UID: p.UID},
			Ordinal:      ordinal,
			Backend:      *p.Spec.Backend.DeepCopy(),
			Access:       &kobev1.AccessSpec{Mode: AccessMode(&p.Spec)},
			Cluster:      *p.Spec.Cluster.DeepCopy(),
			TemplateHash: templateHash,
		},
	}
}

// AccessMode is how lease holders reach the pool's members: the pool's
// access.mode, or else Proxy for backends whose members live in the host
// cluster (callers outside it cannot reach them) and Direct for local and
// sim, whose members listen on the operator's host.
func AccessMode(p *kobev1.ClusterPoolSpec) kobev1.AccessMode {
	if p.Access != nil && p.Access.Mode != "" {
		return p.Access.Mode
	}
	switch p.Backend.Type {
	case kobev1.BackendLocal, kobev1.BackendSim:
		return kobev1.AccessDirect
	default:
		return kobev1.AccessProxy
	}
}

// MemberAccessMode is how lease holders reach inst: what was resolved when
// it was created, Direct for members created before access existed.
func MemberAccessMode(inst *kobev1.ClusterInstance) kobev1.AccessMode {
	if inst.Spec.Access == nil || inst.Spec.Access.Mode == "" {
		return kobev1.AccessDirect
	}
	return inst.Spec.Access.Mode
}

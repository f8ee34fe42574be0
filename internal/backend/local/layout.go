package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/node"
)

// A member's data directory is <DataRoot>/<namespace>_<name>_<uid>. Namespace
// and name are DNS names (no "_"), so the UID is whatever follows the last
// "_"; the name part is cut short so the directory name stays a valid file
// name whatever the object's name length.
const (
	maxDirNamePrefix = 120
	stateFileName    = "state.json"
	stateVersion     = 1
)

var uidPattern = regexp.MustCompile(`^[0-9a-zA-Z-]{1,64}$`)

// memberDirName is the data directory name of a member.
func memberDirName(m backend.Member) string {
	prefix := m.Namespace + "_" + m.Name
	if len(prefix) > maxDirNamePrefix {
		prefix = prefix[:maxDirNamePrefix]
	}
	return prefix + "_" + string(m.UID)
}

// namespaceFromDirName returns the member namespace a data directory name
// carries (a namespace is at most 63 characters, so never cut short).
func namespaceFromDirName(name string) string {
	ns, _, _ := strings.Cut(name, "_")
	return ns
}

// uidFromDirName returns the member UID a data directory name carries.
func uidFromDirName(name string) (types.UID, bool) {
	i := strings.LastIndexByte(name, '_')
	if i < 0 || strings.Count(name, "_") < 2 {
		return "", false
	}
	uid := name[i+1:]
	if !uidPattern.MatchString(uid) {
		return "", false
	}
	return types.UID(uid), true
}

// paths are the files of one member.
type paths struct {
	dir string
}

func (p paths) state() string              { return filepath.Join(p.dir, stateFileName) }
func (p paths) pki(name string) string     { return filepath.Join(p.dir, "pki", name) }
func (p paths) etcdData() string           { return filepath.Join(p.dir, "etcd") }
func (p paths) kubeconfig(c string) string { return filepath.Join(p.dir, c+".kubeconfig") }
func (p paths) log(c string) string        { return filepath.Join(p.dir, "logs", c+".log") }
func (p paths) slotFile() string           { return filepath.Join(p.dir, "slot") }
func (p paths) admissionConfig() string    { return filepath.Join(p.dir, "admission.yaml") }
func (p paths) schedulerConfig() string    { return filepath.Join(p.dir, "kube-scheduler.yaml") }
func (p paths) admissionPolicies() string  { return filepath.Join(p.dir, "admission-policies") }
func (p paths) node(i int, elem ...string) string {
	return filepath.Join(append([]string{p.dir, "nodes", strconv.Itoa(i)}, elem...)...)
}

// Names of the files under pki/.
const (
	serverCACert      = "server-ca.crt"
	clientCACert      = "client-ca.crt"
	clientCAKey       = "client-ca.key"
	apiserverCert     = "apiserver.crt"
	apiserverKey      = "apiserver.key"
	adminCert         = "admin.crt"
	adminKey          = "admin.key"
	serviceAccountKey = "sa.key"
	serviceAccountPub = "sa.pub"
)

// Component names; they are also the names of the binaries.
const (
	compEtcd      = "etcd"
	compAPIServer = "kube-apiserver"
	compKCM       = "kube-controller-manager"
	compScheduler = "kube-scheduler"
	compKwok      = "kwok"
	// compNode is kobe-node, one process per real node; its file name must
	// be kobe-node.
	compNode = "kobe-node"
)

// knownComponents are the binaries a member may run; a process is only ever
// taken for a member's when its argv[0] is one of them.
var knownComponents = []string{compEtcd, compAPIServer, compKCM, compScheduler, compKwok, compNode}

// state is what the backend writes to a member's state file. It is the
// commit point of Create: a data directory without it is a creation that was
// interrupted.
type state struct {
	Version   int       `json:"version"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	// Scheduling is whether kube-scheduler and kwok belong to the member.
	Scheduling bool `json:"scheduling,omitempty"`
	// Nodes is the number of real nodes (kobe-node processes); with nodes
	// kube-scheduler belongs to the member too.
	Nodes int `json:"nodes,omitempty"`
	// KubernetesVersion is the version whose binaries the member runs
	// (versions.go); empty in state files written before versions were
	// chosen: the default.
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// Egress is where the member's pods reach beyond it (nodes only).
	Egress *stateEgress `json:"egress,omitempty"`
	// Slot is the member's host network slot (internal/node), also in the
	// slot file, which is written before the network is touched.
	Slot *int `json:"slot,omitempty"`
	// LocalHost is the address the member's own components reach its API
	// server on: 127.0.0.1, or the member's gateway with nodes.
	LocalHost string `json:"localHost,omitempty"`
	// Endpoint is the API server URL handed out in Access.
	Endpoint string `json:"endpoint"`
	// APIServerPort is the API server's port, chosen at (the last) start.
	// etcd listens on unix sockets in the data directory, so it needs none.
	APIServerPort int `json:"apiServerPort"`
	// Attempt counts starts; a port taken by someone else between choosing
	// and binding it causes another.
	Attempt int `json:"attempt"`
	// StartedAt is when the first attempt started; the provisioning deadline
	// counts from it.
	StartedAt time.Time `json:"startedAt"`
	// Started is true once every component of the member has been started.
	Started bool `json:"started,omitempty"`
	// ReadyAt is when the member was first seen ready.
	ReadyAt *time.Time `json:"readyAt,omitempty"`
	// Failure, once set, is why the member can never become usable.
	Failure string `json:"failure,omitempty"`
	// Processes are the member's running components.
	Processes []process `json:"processes"`
	// Confined: the member's cgroup bounds it (limits.go), and each
	// component joins cpCgroup when it starts.
	Confined bool `json:"confined,omitempty"`
	// PodPidsLimit is the nodes' kubelet podPidsLimit (0: none).
	PodPidsLimit int64 `json:"podPidsLimit,omitempty"`
	// DiskLimit is the size of the member's own file system (diskfs.go;
	// 0: none, and disk.go's measurement bounds it).
	DiskLimit int64 `json:"diskLimit,omitempty"`
}

// stateEgress is the pool's egress as the member was built with it.
type stateEgress struct {
	Public bool     `json:"public,omitempty"`
	Allow  []string `json:"allow,omitempty"`
}

type process struct {
	Component string `json:"component"`
	// Node is the node's index for kobe-node processes.
	Node      int       `json:"node,omitempty"`
	PID       int       `json:"pid"`
	StartedAt time.Time `json:"startedAt"`
}

// logName is the name of the process's log under logs/.
func (pr process) logName() string {
	if pr.Component == compNode {
		return nodeLogName(pr.Node)
	}
	return pr.Component
}

var errNoState = errors.New("no state file")

func readState(p paths) (*state, error) {
	data, err := os.ReadFile(p.state())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errNoState
	}
	if err != nil {
		return nil, fmt.Errorf("reading state file: %w", err)
	}
	var s state
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("parsing state file %s: %w", p.state(), err)
	}
	return &s, nil
}

// validate reports whether s could have been written for m.
func (s *state) validate(m backend.Member) error {
	switch {
	case s.Version != stateVersion:
		return fmt.Errorf("state file version %d, want %d", s.Version, stateVersion)
	case s.UID != m.UID:
		return fmt.Errorf("state file belongs to UID %s, not %s", s.UID, m.UID)
	case s.Endpoint == "" || s.APIServerPort <= 0:
		return errors.New("state file lacks endpoint or port")
	case s.StartedAt.IsZero():
		return errors.New("state file lacks start time")
	}
	for _, pr := range s.Processes {
		if pr.PID <= 0 || pr.Component == "" {
			return fmt.Errorf("state file has an invalid process entry %+v", pr)
		}
	}
	return nil
}

// writeState replaces the state file atomically.
func writeState(p paths, s *state) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding state: %w", err)
	}
	return writeFileAtomic(p.state(), data, 0o600)
}

func writeFileAtomic(path string, data []byte, perm fs.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Chmod(perm); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// memberEgress is the egress a member's pool asks for.
func memberEgress(m backend.Member) *stateEgress {
	e := m.Spec.Cluster.EffectiveEgress()
	if e.Mode != kobev1.EgressPublic && len(e.AllowCIDRs) == 0 {
		return nil
	}
	return &stateEgress{Public: e.Mode == kobev1.EgressPublic, Allow: e.AllowCIDRs}
}

// egress is the member's egress for its host firewall.
func (st *state) egress() (node.Egress, error) {
	if st.Egress == nil {
		return node.Egress{}, nil
	}
	e := node.Egress{Public: st.Egress.Public}
	for _, c := range st.Egress.Allow {
		p, err := netip.ParsePrefix(c)
		if err != nil || !p.Addr().Is4() {
			return node.Egress{}, fmt.Errorf("egress range %q is not an IPv4 CIDR: %w", c, backend.ErrInvalidSpec)
		}
		e.Allow = append(e.Allow, p)
	}
	return e, nil
}

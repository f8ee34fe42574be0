//go:build heavy

package local

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/addressguard"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/clusterdns"
	"github.com/kunobi-ninja/kobe/internal/node"
	"github.com/kunobi-ninja/kobe/internal/podsecurity"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

func TestNodeImages(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{PauseArchive, clusterdns.Archive, "app.tar"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	outside := filepath.Join(filepath.Dir(dir), "outside.tar")
	if err := os.WriteFile(outside, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link.tar")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "d.tar"), 0o700); err != nil {
		t.Fatal(err)
	}
	member := func(images ...string) backend.Member {
		return backend.Member{Spec: kobev1.ClusterInstanceSpec{Backend: kobev1.BackendSpec{Local: &kobev1.LocalBackendSpec{Nodes: ptr.To[int32](1), PreloadImages: images}}}}
	}
	got, err := nodeImages(dir, member("app.tar", "app.tar"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(dir, PauseArchive), filepath.Join(dir, clusterdns.Archive), filepath.Join(dir, "app.tar")}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("nodeImages = %v, want %v (pause first, then the cluster DNS, no duplicates)", got, want)
	}
	for _, bad := range []string{"../outside.tar", "missing.tar", "/etc/passwd", "sub/app.tar", "..", "", "link.tar", "d.tar", "app.tar\x00", `..\outside.tar`, "app"} {
		_, err := nodeImages(dir, member(bad))
		if !errors.Is(err, backend.ErrInvalidSpec) || !strings.Contains(err.Error(), "spec.backend.local.preloadImages") {
			t.Errorf("nodeImages(%q) = %v, want ErrInvalidSpec naming the field", bad, err)
		}
	}
}

func TestFreeSlot(t *testing.T) {
	for _, tc := range []struct {
		used []int
		want int
	}{
		{nil, 0},
		{[]int{0, 1, 3}, 2},
		{[]int{1, 0, 1}, 2},
		{[]int{40, -1}, 0},
	} {
		if got := freeSlot(tc.used); got != tc.want {
			t.Errorf("freeSlot(%v) = %d, want %d", tc.used, got, tc.want)
		}
	}
	all := make([]int, node.MaxSlots)
	for i := range all {
		all[i] = i
	}
	if got := freeSlot(all); got != -1 {
		t.Errorf("freeSlot(all) = %d, want -1", got)
	}
}

func TestReadSlot(t *testing.T) {
	p := paths{dir: t.TempDir()}
	if _, ok, err := readSlot(p); ok || err != nil {
		t.Fatalf("no slot file: ok %v, err %v", ok, err)
	}
	for _, bad := range []string{"x", "-1", "32", ""} {
		if err := os.WriteFile(p.slotFile(), []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := readSlot(p); err == nil {
			t.Errorf("slot file %q accepted", bad)
		}
	}
	if err := os.WriteFile(p.slotFile(), []byte("7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, ok, err := readSlot(p); s != 7 || !ok || err != nil {
		t.Errorf("readSlot = %d, %v, %v", s, ok, err)
	}
}

// TestAdmissionConfig checks the wiring of podsecurity's rendering (tested
// there, and against a real API server in its admissiontest package): the
// configuration names the directory the policies are written to, and a
// privileged member that allows network volumes keeps no policy from an
// earlier level.
func TestAdmissionConfig(t *testing.T) {
	p := paths{dir: t.TempDir()}
	for _, c := range []kobev1.ClusterTemplate{
		{PodSecurity: kobev1.PodSecurityBaseline}, {PodSecurity: kobev1.PodSecurityRestricted},
		{PodSecurity: kobev1.PodSecurityPrivileged}, {PodSecurity: kobev1.PodSecurityBaseline, NetworkVolumes: kobev1.NetworkVolumesAllowed},
		{PodSecurity: kobev1.PodSecurityPrivileged, NetworkVolumes: kobev1.NetworkVolumesAllowed},
	} {
		if err := writeAdmissionConfig(p, c); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(p.admissionConfig())
		if err != nil {
			t.Fatal(err)
		}
		wantConfig, wantPolicies, err := podsecurity.RenderShared(c, p.admissionPolicies())
		if err != nil {
			t.Fatal(err)
		}
		if string(data) != string(wantConfig) {
			t.Errorf("%+v: configuration\n%s\nwant\n%s", c, data, wantConfig)
		}
		policies, err := os.ReadFile(filepath.Join(p.admissionPolicies(), podsecurity.PolicyFile))
		switch {
		case wantPolicies == nil:
			// No policy of podsecurity's, but the directory is read: the
			// address guard lives there at every level.
			if _, serr := os.Stat(p.admissionPolicies()); serr != nil || err == nil || !strings.Contains(string(data), "staticManifestsDir") {
				t.Errorf("%+v: a policy, or no policy directory:\n%s", c, data)
			}
		case err != nil:
			t.Errorf("%+v: no policies: %v", c, err)
		case string(policies) != string(wantPolicies) || !strings.Contains(string(data), "staticManifestsDir: "+p.admissionPolicies()):
			t.Errorf("%+v: policies not wired:\n%s\n%s", c, data, policies)
		}
	}
	if err := writeAdmissionConfig(p, kobev1.ClusterTemplate{PodSecurity: "lax"}); err == nil || !strings.Contains(err.Error(), "spec.cluster.podSecurity") {
		t.Errorf("unknown level: %v", err)
	}
	if got := (kobev1.ClusterTemplate{}).EffectivePodSecurity(); got != kobev1.PodSecurityBaseline {
		t.Errorf("default Pod Security %s, want baseline", got)
	}
}

func TestNodeMemberRefusedWithoutPrereqs(t *testing.T) {
	// Real node binaries, but no kobe-node and no pause archive.
	b, err := New(Options{DataRoot: t.TempDir(), NodeBinDir: filepath.Join(testenv.RepoRoot(), DefaultNodeBinDir), NodeAgent: filepath.Join(t.TempDir(), "kobe-node"), ImageDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m := newMember("n")
	m.Spec.Backend.Local = &kobev1.LocalBackendSpec{Nodes: ptr.To[int32](1)}
	err = b.Create(t.Context(), m)
	if !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("Create = %v, want ErrUnavailable", err)
	}
	if os.Geteuid() == 0 && !strings.Contains(err.Error(), "kobe-node") {
		t.Errorf("error does not name the missing agent: %v", err)
	}
	if os.Geteuid() != 0 && !strings.Contains(err.Error(), "root") {
		t.Errorf("error does not say nodes need root: %v", err)
	}
	if _, statErr := os.Stat(b.MemberDir(m)); statErr == nil {
		t.Error("Create left a member directory behind")
	}
	m.Spec.Backend.Local.Nodes = ptr.To[int32](node.MaxNodes + 1)
	if err := b.Create(t.Context(), m); !errors.Is(err, backend.ErrInvalidSpec) {
		t.Errorf("Create with %d nodes = %v, want ErrInvalidSpec", node.MaxNodes+1, err)
	}
}

// TestAllocateSlot: concurrent Creates never share a slot, another
// operator's live claim is respected, a stale one is not, and a member
// keeps the slot it recorded.
func TestAllocateSlot(t *testing.T) {
	b, err := New(Options{DataRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.slotClaimDir = t.TempDir()
	used, err := node.UsedSlots(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	// Another operator's member holds the lowest free slot; a crashed one
	// left a claim whose directory is gone.
	other := paths{dir: t.TempDir()}
	taken := freeSlot(used)
	if err := os.WriteFile(other.slotFile(), []byte(strconv.Itoa(taken)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.slotClaimDir, strconv.Itoa(taken)), []byte(other.dir), 0o600); err != nil {
		t.Fatal(err)
	}
	stale := freeSlot(append(used, taken))
	if err := os.WriteFile(filepath.Join(b.slotClaimDir, strconv.Itoa(stale)), []byte("/nonexistent/member"), 0o600); err != nil {
		t.Fatal(err)
	}

	const n = 6
	slots := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		p := paths{dir: filepath.Join(b.opts.DataRoot, "ns_m"+strconv.Itoa(i)+"_uid"+strconv.Itoa(i))}
		if err := os.MkdirAll(p.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { slots[i], errs[i] = b.allocateSlot(t.Context(), p) })
	}
	wg.Wait()
	seen := map[int]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if seen[slots[i]] || slots[i] == taken || slices.Contains(used, slots[i]) {
			t.Errorf("slot %d given twice or already taken (slots %v, taken %d, used %v)", slots[i], slots, taken, used)
		}
		seen[slots[i]] = true
	}
	if !seen[stale] {
		t.Errorf("the stale claim's slot %d was not reused: %v", stale, slots)
	}
	p0 := paths{dir: filepath.Join(b.opts.DataRoot, "ns_m0_uid0")}
	if again, err := b.allocateSlot(t.Context(), p0); err != nil || again != slots[0] {
		t.Errorf("allocateSlot again = %d, %v; want the recorded %d", again, err, slots[0])
	}
	if err := b.releaseSlot(p0, slots[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(b.slotClaimDir, strconv.Itoa(slots[0]))); err == nil {
		t.Error("releaseSlot left the claim")
	}
	if err := b.releaseSlot(p0, taken); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(b.slotClaimDir, strconv.Itoa(taken))); err != nil {
		t.Error("releaseSlot removed another member's claim")
	}
}

// TestAPIServerArgs: every member's API server enforces Pod Security from
// its admission configuration; one with nodes listens on its gateway,
// authorizes nodes and reaches kubelets with a certificate.
func TestAPIServerArgs(t *testing.T) {
	b, err := New(Options{DataRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p := paths{dir: filepath.Join(b.opts.DataRoot, "ns_m_uid")}
	has := func(args []string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !slices.Contains(args, w) {
				t.Errorf("kube-apiserver args lack %s: %v", w, args)
			}
		}
	}
	plain, err := b.componentArgs(p, &state{APIServerPort: 6443}, compAPIServer)
	if err != nil {
		t.Fatal(err)
	}
	has(plain, "--admission-control-config-file="+p.admissionConfig(), "--enable-admission-plugins=PodSecurity", "--bind-address=127.0.0.1", "--authorization-mode=RBAC")
	// The address guard holds only with them (webhooks reach endpoints).
	has(plain, addressguard.APIServerFlags()...)

	slot := 3
	mn, err := node.PlanMember(slot, 2)
	if err != nil {
		t.Fatal(err)
	}
	withNodes, err := b.componentArgs(p, &state{APIServerPort: 6443, Nodes: 2, Slot: &slot, LocalHost: mn.Gateway.String()}, compAPIServer)
	if err != nil {
		t.Fatal(err)
	}
	has(withNodes,
		"--admission-control-config-file="+p.admissionConfig(),
		"--bind-address="+mn.Gateway.String(), "--advertise-address="+mn.Gateway.String(),
		"--service-cluster-ip-range="+mn.ServiceCIDR.String(), "--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction,PodSecurity",
		"--kubelet-client-certificate="+p.pki(kubeletClientCert), "--kubelet-preferred-address-types=InternalIP",
	)
	has(withNodes, addressguard.APIServerFlags()...)
	if slices.ContainsFunc(withNodes, func(a string) bool { return strings.HasPrefix(a, "--service-cluster-ip-range=10.") }) {
		t.Errorf("a member with nodes uses the 10/8 Service range: %v", withNodes)
	}
}

// The backend's own cap is the last line behind the pool controller's: a
// data root holding MaxMembers members (another operator's, or ones the
// cache did not show) refuses one more, and a member's own leftover
// directory from an interrupted Create does not count against it.
func TestHostCapRefusesCreate(t *testing.T) {
	b := newBackend(t, func(o *Options) { o.MaxMembers = 1 })
	other, m := newMember("other"), newMember("new")
	if err := os.MkdirAll(filepath.Join(b.opts.DataRoot, memberDirName(other)), 0o700); err != nil {
		t.Fatal(err)
	}
	err := b.Create(t.Context(), m)
	if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "--local-max-members 1") {
		t.Fatalf("Create at the cap = %v, want ErrUnavailable naming the cap", err)
	}
	if _, err := os.Stat(filepath.Join(b.opts.DataRoot, memberDirName(m))); !os.IsNotExist(err) {
		t.Fatalf("a refused member left a directory: %v", err)
	}
	if err := b.checkHostCap(memberDirName(other)); err != nil {
		t.Fatalf("a member's own directory counted against the cap: %v", err)
	}
}

// TestAddressGuardFollowsThePort: the guard names the API server's port of
// the current start, and with nodes the member's ranges and gateway.
func TestAddressGuardFollowsThePort(t *testing.T) {
	p := paths{dir: t.TempDir()}
	if err := writeAdmissionConfig(p, kobev1.ClusterTemplate{PodSecurity: kobev1.PodSecurityPrivileged}); err != nil {
		t.Fatal(err)
	}
	slot := 3
	for _, st := range []*state{{APIServerPort: 40001}, {APIServerPort: 40002, Nodes: 1, Slot: &slot}, {APIServerPort: 40003, Scheduling: true}} {
		if err := writeAddressGuard(p, st); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(p.admissionPolicies(), addressGuardFile))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), fmt.Sprintf("p.port == %d", st.APIServerPort)) {
			t.Errorf("nodes %d: the guard does not pin the API server's port %d:\n%s", st.Nodes, st.APIServerPort, data)
		}
		if st.Scheduling && !strings.Contains(string(data), kwokPodCIDR.String()) {
			t.Errorf("the guard of a member with kwok does not admit kwok's pod range:\n%s", data)
		}
		if st.Nodes > 0 && !strings.Contains(string(data), "198.19.195.1") {
			t.Errorf("the guard of a member with nodes does not name its gateway:\n%s", data)
		}
		if st.Nodes == 0 && !st.Scheduling && strings.Contains(string(data), "cidr(") {
			t.Errorf("a member without nodes admits some pod address:\n%s", data)
		}
	}
}

// TestKwokRangesAreNobodys: kwok's fake addresses are in no node network
// of any slot, so admitting them admits nothing real.
func TestKwokRangesAreNobodys(t *testing.T) {
	for s := range node.MaxSlots {
		mn, err := node.PlanMember(s, node.MaxNodes)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []netip.Prefix{mn.ClusterCIDR, mn.ServiceCIDR, mn.Link} {
			if p.Overlaps(kwokPodCIDR) || p.Contains(kwokNodeIP) {
				t.Errorf("slot %d's %s overlaps kwok's %s or %s", s, p, kwokPodCIDR, kwokNodeIP)
			}
		}
	}
	if !node.ServiceRegion.Contains(kwokNodeIP) || !node.ServiceRegion.Overlaps(kwokPodCIDR) {
		t.Errorf("kwok's addresses are outside %s, which the host routes nowhere", node.ServiceRegion)
	}
}

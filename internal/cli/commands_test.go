package cli

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/kunobi-ninja/kobe/internal/apiclient/apiclienttest"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

func TestLeaseWritesKubeconfig(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t)
	e.withServer(t, srv)

	r := mustKobe(t, "lease", "ci-small", "--ttl", "30m")
	id := "lease-000000000001"
	path := filepath.Join(e.runtimeDir, "kobe", "kubeconfig-"+id)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("kubeconfig not at the default path: %v\n%s", err, r)
	}
	if !sameKubeconfig(t, string(data), apiclienttest.Kubeconfig(id)) {
		t.Errorf("kubeconfig content %q", data)
	}
	if got := fileMode(t, path); got != 0o600 {
		t.Errorf("kubeconfig mode %o, want 600", got)
	}
	for _, want := range []string{
		"# Lease " + id + " is Bound to cluster pool-ci-small-0 of pool ci-small.",
		"# Expires at 2026-04-09T15:00:00Z",
		"effective TTL 30m",
		"export KUBECONFIG=" + path + "\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r)
		}
	}
	// Every line but the export is a shell comment, so eval works.
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if !strings.HasPrefix(line, "# ") && !strings.HasPrefix(line, "export ") {
			t.Errorf("line not safe for eval: %q", line)
		}
	}

	custom := filepath.Join(t.TempDir(), "nested", "dir", "kc.yaml")
	r = mustKobe(t, "lease", "ci-small", "--kubeconfig", custom, "-o", "json")
	var out map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("-o json: %v\n%s", err, r)
	}
	if out["id"] != "lease-000000000002" || out["phase"] != "Bound" || out["kubeconfig_path"] != custom || out["effective_ttl"] != "1h" {
		t.Errorf("-o json: %v", out)
	}
	if _, leaked := out["kubeconfig"]; leaked {
		t.Errorf("-o json must not print the kubeconfig: %s", r.stdout)
	}
	if got := fileMode(t, custom); got != 0o600 {
		t.Errorf("custom kubeconfig mode %o", got)
	}
}

func TestLeaseWaitsInQueue(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t, apiclienttest.WithPendingPolls(2))
	e.withServer(t, srv)

	r := mustKobe(t, "lease", "ci-small")
	if !strings.Contains(r.stderr, "Waiting for a cluster: lease lease-000000000001 is number 1 in pool ci-small's queue") {
		t.Errorf("no progress line on stderr: %s", r)
	}
	if !strings.Contains(r.stdout, "export KUBECONFIG=") {
		t.Errorf("no export line: %s", r)
	}
}

func TestLeaseWaitTimeoutReleases(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t, apiclienttest.WithPendingPolls(1<<20))
	e.withServer(t, srv)

	r := kobe(t, "lease", "ci-small", "--wait-timeout", "300ms")
	if r.code != 1 {
		t.Fatalf("want exit 1: %s", r)
	}
	if !strings.Contains(r.stderr, "was not bound within --wait-timeout") || !strings.Contains(r.stderr, "released it") {
		t.Errorf("timeout message: %s", r)
	}
	if got := srv.Released(); len(got) != 1 || got[0] != "lease-000000000001" {
		t.Errorf("lease not released after the timeout: %v", got)
	}
}

func TestLeaseEndedWhileQueued(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t, apiclienttest.WithPendingPolls(1), apiclienttest.WithEndWhilePending(wire.PhaseExpired))
	e.withServer(t, srv)

	r := kobe(t, "lease", "ci-small")
	if r.code != 1 || !strings.Contains(r.stderr, "ended before it was bound: phase Expired: queue timeout") {
		t.Fatalf("%s", r)
	}
}

func TestLeaseNoWait(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t, apiclienttest.WithPendingPolls(2))
	e.withServer(t, srv)

	r := mustKobe(t, "lease", "ci-small", "--no-wait")
	if !strings.Contains(r.stdout, "is Pending: number 1 in pool ci-small's queue") ||
		!strings.Contains(r.stdout, "export KOBE_LEASE_ID=lease-000000000001") {
		t.Errorf("%s", r)
	}
	r = kobe(t, "kubeconfig", "lease-000000000001")
	if r.code == 0 || !strings.Contains(r.stderr, "still Pending") {
		t.Errorf("kubeconfig of a pending lease: %s", r)
	}
	r = mustKobe(t, "kubeconfig", "lease-000000000001")
	if !strings.Contains(r.stdout, "export KUBECONFIG=") {
		t.Errorf("kubeconfig once bound: %s", r)
	}
	if _, err := os.Stat(filepath.Join(e.runtimeDir, "kobe", "kubeconfig-lease-000000000001")); err != nil {
		t.Error(err)
	}

	// Two queued leases: the second is number 2, live.
	mustKobe(t, "lease", "ci-small", "--no-wait")
	r = mustKobe(t, "lease", "ci-small", "--no-wait", "-o", "json")
	var l wire.Lease
	if err := json.Unmarshal([]byte(r.stdout), &l); err != nil || l.Phase != wire.PhasePending || l.QueuePosition != 2 {
		t.Errorf("-o json: %v %+v", err, l)
	}
}

func TestReleaseRemovesDefaultKubeconfig(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t)
	e.withServer(t, srv)

	mustKobe(t, "lease", "ci-small")
	path := filepath.Join(e.runtimeDir, "kobe", "kubeconfig-lease-000000000001")
	r := mustKobe(t, "release", "lease-000000000001")
	if !strings.Contains(r.stdout, "Released lease lease-000000000001") {
		t.Errorf("%s", r)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("kubeconfig still there: %v", err)
	}
	r = mustKobe(t, "release", "lease-000000000001", "-o", "json")
	if !strings.Contains(r.stdout, `"released": [`) {
		t.Errorf("-o json: %s", r)
	}
	// The server answers the same for a lease the caller does not hold, so
	// that DELETE tells nobody whether it exists; nothing is released.
	r = kobe(t, "release", "lease-999999999999")
	if r.code != 0 {
		t.Errorf("unknown lease: %s", r)
	}
	r = kobe(t, "release", "Not_An_ID")
	if r.code != 1 || !strings.Contains(r.stderr, "neither a lease ID") {
		t.Errorf("malformed id: %s", r)
	}
	if got := srv.Released(); len(got) != 2 {
		t.Errorf("released %v", got)
	}
}

func TestExtend(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t)
	e.withServer(t, srv)
	mustKobe(t, "lease", "ci-small", "--ttl", "30m")

	r := mustKobe(t, "extend", "lease-000000000001")
	if !strings.Contains(r.stdout, "now expires at 2026-04-09T15:30:00Z") || !strings.Contains(r.stdout, "1 of 2 extensions used") {
		t.Errorf("%s", r)
	}
	r = mustKobe(t, "extend", "lease-000000000001", "--ttl", "1h", "-o", "json")
	var out map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out["expires_at"] != "2026-04-09T16:30:00Z" || out["extensions"] != 2.0 {
		t.Errorf("-o json: %v %v", err, out)
	}
	r = kobe(t, "extend", "lease-000000000001")
	if r.code != 1 || !strings.Contains(r.stderr, "extension limit reached: lease lease-000000000001 has used 2 of 2 extensions") {
		t.Errorf("refused extension must show the server's message: %s", r)
	}
}

func TestListCommands(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t, apiclienttest.WithPool(wire.Pool{Name: "burst", Phase: "Scaling", QueueDepth: 2,
		Policy: wire.PoolPolicy{Mode: "autoscaled", TTL: "30m", MaxClusters: 10}}))
	e.withServer(t, srv)

	r := mustKobe(t, "leases")
	if !strings.Contains(r.stdout, "no active leases") {
		t.Errorf("empty leases: %s", r)
	}
	mustKobe(t, "lease", "ci-small")

	r = mustKobe(t, "leases")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "ID ") || !strings.Contains(lines[1], "lease-000000000001") ||
		!strings.Contains(lines[1], "pool-ci-small-0") || !strings.Contains(lines[1], "0/2") {
		t.Errorf("leases table: %s", r)
	}
	r = mustKobe(t, "leases", "-o", "json")
	var leases []wire.Lease
	if err := json.Unmarshal([]byte(r.stdout), &leases); err != nil || len(leases) != 1 || leases[0].Kubeconfig != "" {
		t.Errorf("leases -o json: %v %s", err, r)
	}
	r = mustKobe(t, "leases", "--pool", "ci-small")
	if !strings.Contains(r.stdout, "REQUESTER") || !strings.Contains(r.stdout, "tester") {
		t.Errorf("pool leases: %s", r)
	}

	r = mustKobe(t, "pools")
	if !strings.Contains(r.stdout, "QUEUE") || !strings.Contains(r.stdout, "burst") || !strings.Contains(r.stdout, "autoscaled") {
		t.Errorf("pools: %s", r)
	}
	r = mustKobe(t, "pools", "burst", "-o", "json")
	var p wire.Pool
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil || p.QueueDepth != 2 || p.Policy.MaxClusters != 10 {
		t.Errorf("pool -o json: %v %s", err, r)
	}
	if !strings.Contains(r.stdout, `"queueDepth": 2`) {
		t.Errorf("pool JSON must keep the contract's names: %s", r.stdout)
	}
	r = kobe(t, "pools", "nope")
	if r.code != 1 || !strings.Contains(r.stderr, "pool not found") {
		t.Errorf("unknown pool: %s", r)
	}
}

func TestStatusAndLogin(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t)
	t.Setenv("KOBE_ENDPOINT", srv.URL)

	r := mustKobe(t, "status")
	for _, want := range []string{"Server version:", "v0.0.0-fake", "Auth methods:", "token", "Your credentials:", "none"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status without credentials lacks %q: %s", want, r)
		}
	}
	if strings.Contains(r.stdout, "ci-small") {
		t.Errorf("pools shown without credentials: %s", r)
	}
	r = kobe(t, "whoami")
	if r.code != 1 || !strings.Contains(r.stderr, "no credentials configured") {
		t.Errorf("whoami without credentials: %s", r)
	}
	r = kobe(t, "login")
	if r.code != 1 || !strings.Contains(r.stderr, "publishes no login for people (GET /.well-known/kunobi-auth: 404)") {
		t.Errorf("login without credentials from a server without login: %s", r)
	}

	e.withServer(t, srv)
	r = mustKobe(t, "status", "-o", "json")
	var st wire.Status
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.Pools) != 1 {
		t.Errorf("status -o json: %v %s", err, r)
	}
	r = mustKobe(t, "login")
	for _, want := range []string{"Logged in to " + srv.URL + " as tester", "fake-policy", "ci-small", "Max TTL:", "2h"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("login lacks %q: %s", want, r)
		}
	}
	if w := mustKobe(t, "whoami"); w.stdout != r.stdout {
		t.Errorf("whoami and login (checking configured credentials) differ:\n%s\n%s", w, r)
	}
	r = mustKobe(t, "login", "-o", "json")
	var who wire.WhoAmI
	if err := json.Unmarshal([]byte(r.stdout), &who); err != nil || who.Identity != "tester" {
		t.Errorf("login -o json: %v %s", err, r)
	}

	t.Setenv("KOBE_TOKEN", "wrong")
	r = kobe(t, "login")
	if r.code != 1 || !strings.Contains(r.stderr, "unauthorized") || !strings.Contains(r.stderr, "hint: the server did not accept your credentials") {
		t.Errorf("bad token: %s", r)
	}
}

func TestErrorsSayWhatToFix(t *testing.T) {
	newTestEnv(t)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"leases"}, "error: no endpoint configured: run `kobe config set NAME --endpoint URL` or set KOBE_ENDPOINT"},
		{[]string{"lease", "a", "b"}, "expects at most one pool name"},
		{[]string{"lease", "Bad_Pool"}, `"Bad_Pool" is not a pool name`},
		{[]string{"lease", "ci-small", "--ttl", "forever"}, `--ttl "forever" is not a positive duration`},
		{[]string{"lease", "ci-small", "-o", "yaml"}, `unknown output format "yaml"`},
		{[]string{"extend", "../etc"}, "is neither a lease ID"},
		{[]string{"lease", "ci-small", "--bogus"}, "unknown flag: --bogus\nRun 'kobe lease --help' for usage"},
	}
	for _, tt := range tests {
		r := kobe(t, tt.args...)
		if r.code != 1 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("kobe %v: want exit 1 and %q: %s", tt.args, tt.want, r)
		}
	}

	t.Setenv("KOBE_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("KOBE_TOKEN", "t")
	r := kobe(t, "leases")
	if r.code != 1 || !strings.Contains(r.stderr, "http://127.0.0.1:1/v1/leases") || !strings.Contains(r.stderr, "hint: is the endpoint right") {
		t.Errorf("unreachable endpoint: %s", r)
	}
}

func TestVersionAndCompletion(t *testing.T) {
	newTestEnv(t)
	r := mustKobe(t, "version")
	if !strings.HasPrefix(r.stdout, "kobe dev (") {
		t.Errorf("version: %s", r)
	}
	r = mustKobe(t, "version", "-o", "json")
	if !strings.Contains(r.stdout, `"version": "dev"`) {
		t.Errorf("version -o json: %s", r)
	}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		if r := mustKobe(t, "completion", shell); !strings.Contains(r.stdout, "kobe") {
			t.Errorf("completion %s: %s", shell, r)
		}
	}
}

func TestSSHAuth(t *testing.T) {
	newTestEnv(t)
	ag := apiclienttest.StartSSHAgent(t)
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub := ag.Add(t, priv, "alice@laptop")
	pubFile := filepath.Join(t.TempDir(), "id_ed25519.pub")
	if err := os.WriteFile(pubFile, ssh.MarshalAuthorizedKey(pub), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := apiclienttest.New(t, apiclienttest.WithSSHKeys(map[string]string{ssh.FingerprintSHA256(pub): "alice"}))
	t.Setenv("SSH_AUTH_SOCK", ag.Socket)

	mustKobe(t, "config", "set", "dev", "--endpoint", srv.URL, "--auth", "ssh", "--ssh-key", pubFile)
	r := mustKobe(t, "login")
	if !strings.Contains(r.stdout, "as alice") {
		t.Errorf("login with the agent key: %s", r)
	}
	r = mustKobe(t, "lease", "ci-small", "-o", "json")
	if !strings.Contains(r.stdout, `"requester": "alice"`) {
		t.Errorf("signed POST: %s", r)
	}
	r = kobe(t, "login", "--ssh-key", "bob@desktop")
	if r.code != 1 || !strings.Contains(r.stderr, `no key in the SSH agent matches "bob@desktop"`) {
		t.Errorf("unknown key: %s", r)
	}
}

func TestLeaseAlias(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t)
	e.withServer(t, srv)

	r := mustKobe(t, "lease", "ci-small", "--alias", "build-42", "-o", "json")
	var l wire.Lease
	if err := json.Unmarshal([]byte(r.stdout), &l); err != nil || l.Alias != "build-42" {
		t.Fatalf("lease --alias: %v %s", err, r)
	}
	path := filepath.Join(e.runtimeDir, "kobe", "kubeconfig-"+l.ID)
	if r := mustKobe(t, "kubeconfig", "build-42"); !strings.Contains(r.stdout, "export KUBECONFIG="+path) {
		t.Errorf("kubeconfig by alias: %s", r)
	}
	r = kobe(t, "lease", "ci-small", "--alias", "build-42")
	if r.code != 1 || !strings.Contains(r.stderr, "AliasInUse") || !strings.Contains(r.stderr, "already hold an active lease") {
		t.Errorf("second lease with the alias: want the server's detail and reason: %s", r)
	}
	if r := mustKobe(t, "release", "build-42"); !strings.Contains(r.stdout, "Released lease build-42") {
		t.Errorf("release by alias: %s", r)
	}
	if got := srv.Released(); len(got) != 1 || got[0] != l.ID {
		t.Errorf("released %v, want [%s]", got, l.ID)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("kubeconfig of the released alias still there: %v", err)
	}
	for _, bad := range []string{"Build", "lease-0123456789ab", "-x"} {
		if r := kobe(t, "lease", "ci-small", "--alias", bad); r.code != 1 || !strings.Contains(r.stderr, "--alias") {
			t.Errorf("--alias %q: %s", bad, r)
		}
	}
}

// TestPurge: `kobe purge` releases every active lease of the caller, or
// those of --pool, removes their default kubeconfigs, and says so when
// there is nothing to release.
func TestPurge(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t, apiclienttest.WithPool(wire.Pool{Name: "ci-large", Phase: "Healthy", Ready: 2,
		Policy: wire.PoolPolicy{Mode: "fixed", TTL: "1h", WarmTarget: 2}}))
	e.withServer(t, srv)

	mustKobe(t, "lease", "ci-small")
	mustKobe(t, "lease", "ci-small")
	mustKobe(t, "lease", "ci-large")
	r := mustKobe(t, "purge", "--pool", "ci-large", "-o", "json")
	if got := srv.Released(); len(got) != 1 || got[0] != "lease-000000000003" {
		t.Fatalf("purge --pool ci-large released %v, want only lease-000000000003\n%s", got, r)
	}
	r = mustKobe(t, "purge")
	for _, id := range []string{"lease-000000000001", "lease-000000000002"} {
		if !strings.Contains(r.stdout, "Released lease "+id) {
			t.Errorf("purge does not say it released %s:\n%s", id, r)
		}
		if _, err := os.Stat(filepath.Join(e.runtimeDir, "kobe", "kubeconfig-"+id)); !os.IsNotExist(err) {
			t.Errorf("kubeconfig of %s still there: %v", id, err)
		}
	}
	if got := srv.Released(); len(got) != 3 {
		t.Errorf("released %v, want all three", got)
	}
	if r := mustKobe(t, "purge"); !strings.Contains(r.stdout, "No active leases") {
		t.Errorf("purge with nothing left: %s", r)
	}
	if r := kobe(t, "purge", "--pool", "Not_A_Pool"); r.code != 1 || !strings.Contains(r.stderr, "--pool") {
		t.Errorf("purge with a malformed pool: %s", r)
	}
	if r := kobe(t, "purge", "lease-000000000001"); r.code != 1 || !strings.Contains(r.stderr, "no arguments") {
		t.Errorf("purge with an argument: %s", r)
	}
}

// TestLeaseWithoutPool: `kobe lease` without POOL leases from the one pool
// open to the caller, and otherwise says which pools there are (or that
// there are none) without creating anything.
func TestLeaseWithoutPool(t *testing.T) {
	t.Run("one pool", func(t *testing.T) {
		e := newTestEnv(t)
		srv := apiclienttest.New(t)
		e.withServer(t, srv)
		r := mustKobe(t, "lease", "-o", "json")
		if !strings.Contains(r.stdout, `"pool": "ci-small"`) {
			t.Errorf("lease without a pool: %s", r)
		}
	})
	t.Run("several pools", func(t *testing.T) {
		e := newTestEnv(t)
		srv := apiclienttest.New(t, apiclienttest.WithPool(wire.Pool{Name: "ci-large", Phase: "Healthy", Ready: 1,
			Policy: wire.PoolPolicy{Mode: "fixed", TTL: "1h", WarmTarget: 1}}))
		e.withServer(t, srv)
		r := kobe(t, "lease")
		if r.code != 1 || !strings.Contains(r.stderr, "2 pools are open to you (ci-large, ci-small)") || !strings.Contains(r.stderr, "kobe lease ci-large") {
			t.Errorf("lease without a pool among two: %s", r)
		}
		if _, ok := srv.Lease("lease-000000000001"); ok {
			t.Error("a lease was created although no pool was chosen")
		}
	})
	t.Run("no pool", func(t *testing.T) {
		e := newTestEnv(t)
		srv := apiclienttest.New(t, apiclienttest.WithIdentity(apiclienttest.Token, apiclienttest.Identity{Name: "tester", Pools: []string{"elsewhere-*"}}))
		e.withServer(t, srv)
		if r := kobe(t, "lease"); r.code != 1 || !strings.Contains(r.stderr, "no pool is open to you") {
			t.Errorf("lease without a pool, none open: %s", r)
		}
	})
	t.Run("two pools named", func(t *testing.T) {
		newTestEnv(t)
		if r := kobe(t, "lease", "a", "b"); r.code != 1 || !strings.Contains(r.stderr, "at most one pool name") {
			t.Errorf("lease a b: %s", r)
		}
	})
}

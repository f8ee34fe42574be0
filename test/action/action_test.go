//go:build integration

// Package action tests the repository's GitHub Action (action.yml, whose
// logic is action/run.sh) without GitHub and without network: the script
// runs as the runner would run it, against an httptest server that plays
// GitHub (release downloads of archives that hack/release.sh built, the
// release list, the job's OIDC token endpoint), and the kobe it installs
// leases for real from a real kobe-operator (sim backend) on the test
// control plane, authenticated by an OIDC AccessPolicy.
package action

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-logr/logr"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/oidcissuer"
	"github.com/kunobi-ninja/kobe/internal/testenv/operatorproc"
)

const (
	namespace  = "default"
	repository = "kunobi-ninja/kobe" // where the releases are
	// release is the version the test builds and serves; the release list
	// also names others that are not downloadable.
	release     = "v0.9.1"
	callerRepo  = "my-org/my-repo"
	requestTok  = "request-token-of-the-job"
	poolName    = "ci-small"
	kidActions  = "actions-key"
	scriptPath  = "action/run.sh"
	tokenExpiry = 10 * time.Minute
)

// fakeGitHub serves what the script asks GitHub for.
type fakeGitHub struct {
	*httptest.Server
	dist   string // <dist>/<version>/<asset>
	issuer *oidcissuer.Issuer
	key    *ecdsa.PrivateKey
	tamper atomic.Bool // serve the archives with one byte changed
	// life, when set, is how long kobe accepts each token minted from
	// then on: the token is dated back by the clock skew kobe's OIDC
	// verifier allows on exp (auth.DefaultOIDCLeeway), as from an issuer
	// whose clock is that much behind, and expires life after that.
	life atomic.Int64
	// hiccups, when set, fails every third token request with a 403.
	hiccups atomic.Bool

	mu        sync.Mutex
	audiences []string // of every token minted
	refused   int      // token requests with a wrong bearer
	requests  int      // token requests with the right bearer
}

func newFakeGitHub(t *testing.T, dist string) *fakeGitHub {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	g := &fakeGitHub{dist: dist, issuer: oidcissuer.New(t), key: key}
	g.issuer.Publish(key, kidActions, jose.ES256)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /"+repository+"/releases/download/{version}/{asset}", func(w http.ResponseWriter, r *http.Request) {
		b, err := os.ReadFile(filepath.Join(g.dist, filepath.Base(r.PathValue("version")), filepath.Base(r.PathValue("asset"))))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		if g.tamper.Load() && strings.HasSuffix(r.PathValue("asset"), ".tar.gz") {
			b = bytes.Clone(b)
			b[len(b)/2] ^= 0xff
		}
		_, _ = w.Write(b)
	})
	mux.HandleFunc("GET /api/repos/"+repository+"/releases", func(w http.ResponseWriter, _ *http.Request) {
		type rel struct {
			Tag        string `json:"tag_name"`
			Draft      bool   `json:"draft"`
			Prerelease bool   `json:"prerelease"`
		}
		_ = json.NewEncoder(w).Encode([]rel{
			{Tag: "v1.0.0-rc.1", Prerelease: true}, {Tag: "v0.10.0", Draft: true},
			{Tag: "v0.8.4"}, {Tag: release}, {Tag: "v0.9.0"}, {Tag: "v0.1.12"},
		})
	})
	// GitHub's ID-token endpoint: ACTIONS_ID_TOKEN_REQUEST_URL carries
	// api-version; the runner's request token is the bearer; the audience
	// comes as a query parameter. The token is signed by the test issuer
	// with the claims GitHub sets.
	mux.HandleFunc("GET /oidc/token", func(w http.ResponseWriter, r *http.Request) {
		scheme, bearer, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		if !strings.EqualFold(scheme, "bearer") || bearer != requestTok || r.URL.Query().Get("api-version") != "2.0" {
			g.mu.Lock()
			g.refused++
			g.mu.Unlock()
			http.Error(w, `{"message":"bad credentials"}`, http.StatusUnauthorized)
			return
		}
		aud := r.URL.Query().Get("audience")
		g.mu.Lock()
		g.requests++
		hiccup := g.hiccups.Load() && g.requests%3 == 0
		if !hiccup {
			g.audiences = append(g.audiences, aud)
		}
		g.mu.Unlock()
		if hiccup {
			http.Error(w, `{"message":"a hiccup"}`, http.StatusForbidden)
			return
		}
		iat, exp := time.Now(), time.Now().Add(tokenExpiry)
		if life := time.Duration(g.life.Load()); life > 0 {
			iat = time.Now().Add(-auth.DefaultOIDCLeeway)
			exp = iat.Add(life)
		}
		tok, err := oidcissuer.Sign(g.key, kidActions, jose.ES256, map[string]any{
			"iss": g.issuer.URL, "aud": aud, "sub": "repo:" + callerRepo + ":ref:refs/heads/main",
			"repository": callerRepo, "ref": "refs/heads/main",
			"iat": iat.Unix(), "nbf": iat.Unix(), "exp": exp.Unix(),
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"count": 1, "value": tok})
	})
	g.Server = httptest.NewServer(mux)
	t.Cleanup(g.Close)
	return g
}

func (g *fakeGitHub) mintedAudiences() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.audiences...)
}

// releaseEpoch is SOURCE_DATE_EPOCH of the test's release builds.
const releaseEpoch = 1790000000

// buildRelease runs hack/release.sh, as `make release` does, for this
// machine's platform only, into dir.
func buildRelease(dir, version string) error {
	c := exec.Command(filepath.Join(testenv.RepoRoot(), "hack/release.sh"))
	c.Env = append(os.Environ(), "VERSION="+version, "DIST_DIR="+dir, fmt.Sprintf("SOURCE_DATE_EPOCH=%d", releaseEpoch),
		"PLATFORMS="+runtime.GOOS+"/"+runtime.GOARCH, "OPERATOR_PLATFORMS=")
	if out, err := c.CombinedOutput(); err != nil {
		return fmt.Errorf("hack/release.sh: %w\n%s", err, out)
	}
	return nil
}

// shared is the release both tests use (one link of kobe fewer on a
// 2-core machine): built once, removed by TestMain.
var shared struct {
	once sync.Once
	root string // <root>/<release>/<asset>, as fakeGitHub serves it
	err  error
}

func sharedRelease() (string, error) {
	shared.once.Do(func() {
		if shared.root, shared.err = os.MkdirTemp("", "kobe-action-release-"); shared.err == nil {
			shared.err = buildRelease(filepath.Join(shared.root, release), release)
		}
	})
	return shared.root, shared.err
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.root != "" {
		_ = os.RemoveAll(shared.root)
	}
	os.Exit(code)
}

// runner is one run of action/run.sh with a runner's environment.
type runner struct {
	env  map[string]string
	work string
	// cancelAfter, when set: once the command has printed its lease id,
	// the test waits this long and sends SIGTERM to the step's process
	// group, as when a job is cancelled.
	cancelAfter time.Duration
}

var leaseLine = regexp.MustCompile(`lease=(lease-[0-9a-f]{12})`)

func newRunner(t *testing.T, g *fakeGitHub, endpoint string) *runner {
	work := t.TempDir()
	arch := map[string]string{"amd64": "X64", "arm64": "ARM64"}[runtime.GOARCH]
	osName := map[string]string{"linux": "Linux", "darwin": "macOS"}[runtime.GOOS]
	return &runner{work: work, env: map[string]string{
		"PATH": os.Getenv("PATH"), "HOME": work, "XDG_CONFIG_HOME": filepath.Join(work, "config"),
		"RUNNER_OS": osName, "RUNNER_ARCH": arch, "RUNNER_TEMP": filepath.Join(work, "runner-temp"),
		"GITHUB_SERVER_URL": g.URL, "GITHUB_API_URL": g.URL + "/api", "GITHUB_PATH": filepath.Join(work, "github-path"),
		"GITHUB_TOKEN":                   "ghs_job-token",
		"ACTIONS_ID_TOKEN_REQUEST_URL":   g.URL + "/oidc/token?api-version=2.0",
		"ACTIONS_ID_TOKEN_REQUEST_TOKEN": requestTok,
		"KOBE_ACTION_POOL":               poolName,
		"KOBE_ACTION_ENDPOINT":           endpoint,
		"KOBE_ACTION_VERSION":            release,
		"KOBE_ACTION_REPOSITORY":         repository,
	}}
}

// run runs the script and returns its combined output and exit code. The
// step must leave nothing behind: no process of its own (it runs in a
// process group of its own, as the script and everything it starts) and no
// token directory in RUNNER_TEMP.
func (r *runner) run(t *testing.T) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, filepath.Join(testenv.RepoRoot(), scriptPath))
	c.Dir = r.work
	for k, v := range r.env {
		c.Env = append(c.Env, k+"="+v)
	}
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A process that outlives the script and keeps its output open makes
	// Wait give up after WaitDelay instead of hanging the test.
	c.WaitDelay = 10 * time.Second
	var out testenv.Output
	c.Stdout, c.Stderr = &out, &out
	if err := c.Start(); err != nil {
		t.Fatalf("starting %s: %v", scriptPath, err)
	}
	done := make(chan struct{})
	if r.cancelAfter > 0 {
		go func() {
			for !leaseLine.MatchString(out.String()) {
				select {
				case <-done:
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
			select {
			case <-done:
			case <-time.After(r.cancelAfter):
				_ = syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
			}
		}()
	}
	err := c.Wait()
	close(done)
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case errors.Is(err, exec.ErrWaitDelay):
		t.Errorf("the step's output stayed open %s after the script exited", c.WaitDelay)
	case err != nil:
		t.Fatalf("running %s: %v\n%s", scriptPath, err, out.String())
	}
	if left := groupProcesses(t, c.Process.Pid); len(left) > 0 {
		t.Errorf("processes of the step still running after it ended:\n%s", strings.Join(left, "\n"))
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	}
	if left, _ := filepath.Glob(filepath.Join(r.env["RUNNER_TEMP"], "kobe-token.*")); len(left) > 0 {
		t.Errorf("token directories left in RUNNER_TEMP after the step: %q", left)
	}
	return out.String(), code
}

// groupProcesses lists, as ps prints them, the processes of process group
// pgid that have not exited (zombies are exited processes their parent has
// not reaped yet).
func groupProcesses(t *testing.T, pgid int) []string {
	t.Helper()
	out, err := exec.Command("ps", "-A", "-o", "pgid=,stat=,pid=,args=").Output()
	if err != nil {
		t.Fatalf("ps: %v", err)
	}
	var left []string
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == strconv.Itoa(pgid) && !strings.HasPrefix(f[1], "Z") {
			left = append(left, strings.TrimSpace(line))
		}
	}
	return left
}

// leases lists the ClusterLeases in the test namespace.
func leases(t *testing.T, c client.Client) []kobev1.ClusterLease {
	t.Helper()
	var l kobev1.ClusterLeaseList
	if err := c.List(t.Context(), &l, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func TestAction(t *testing.T) {
	ctrllog.SetLogger(logr.Discard()) // the test API server's start-up chatter
	// The release archive and the operator build while the control plane
	// starts.
	start := time.Now()
	opDir := t.TempDir()
	var dist, bin string
	var releaseErr, buildErr error
	var wg sync.WaitGroup
	wg.Go(func() { dist, releaseErr = sharedRelease() })
	wg.Go(func() { bin, buildErr = operatorproc.Build(opDir) })
	env := testenv.Start(t)
	wg.Wait()
	if releaseErr != nil || buildErr != nil {
		t.Fatal(releaseErr, buildErr)
	}
	t.Logf("release archive, operator build and control plane ready after %s", time.Since(start).Round(time.Millisecond))
	op, err := operatorproc.Start(operatorproc.Options{Binary: bin, Kubeconfig: env.Kubeconfig, Namespace: namespace, Dir: opDir,
		Args: []string{"--enable-sim-backend"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := op.Stop(); err != nil {
			t.Errorf("stopping the operator: %v", err)
		}
		if t.Failed() {
			t.Logf("operator log tail:\n%s", op.Tail(40))
		}
	})
	if err := op.WaitReady(t.Context(), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("operator ready after %s", time.Since(start).Round(time.Millisecond))

	g := newFakeGitHub(t, dist)
	ctx := t.Context()
	policy := &kobev1.AccessPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "github-ci", Namespace: namespace},
		Spec: kobev1.AccessPolicySpec{
			Auth:     kobev1.AuthSpec{OIDC: &kobev1.OIDCAuth{Issuer: g.issuer.URL, Audience: []string{op.APIURL}}},
			Identity: "{repository}",
			Rules: []kobev1.AccessRule{{
				Match: &kobev1.ClaimMatch{Claim: "repository", Value: callerRepo},
				Pools: []string{"ci-*"}, MaxTTL: &metav1.Duration{Duration: time.Hour},
			}},
		},
	}
	pool := &kobev1.ClusterPool{
		ObjectMeta: metav1.ObjectMeta{Name: poolName, Namespace: namespace},
		Spec: kobev1.ClusterPoolSpec{
			Size: ptr.To[int32](1), TTL: &metav1.Duration{Duration: 30 * time.Minute},
			Backend: kobev1.BackendSpec{Type: kobev1.BackendSim, Sim: &kobev1.SimBackendSpec{ReadyAfter: &metav1.Duration{Duration: time.Second}}},
		},
	}
	for _, o := range []client.Object{policy, pool} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, "the OIDC AccessPolicy to be Ready", func() error {
		got := &kobev1.AccessPolicy{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(policy), got); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, kobev1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Ready condition %+v", c)
		}
		return nil
	})
	t.Logf("AccessPolicy ready after %s", time.Since(start).Round(time.Millisecond))

	// The whole path: download, checksum, install, OIDC token for the
	// endpoint's audience, kobe run with the lease's kubeconfig; the
	// command's exit status is the step's.
	t.Run("runs the command on a leased cluster", func(t *testing.T) {
		r := newRunner(t, g, op.APIURL)
		r.env["KOBE_ACTION_TTL"] = "12m"
		r.env["KOBE_ACTION_HEARTBEAT_TIMEOUT"] = "2m"
		r.env["KOBE_ACTION_COMMAND"] = `echo "lease=$KOBE_LEASE_ID"; grep -q '^kind: Config' "$KUBECONFIG" && echo "kubeconfig at $KUBECONFIG"; exit 7`
		out, code := r.run(t)
		t.Logf("action output:\n%s", out)
		if code != 7 {
			t.Fatalf("exit status %d, want the command's 7", code)
		}
		for _, want := range []string{
			"kobe " + release + " (", // kobe version of the installed CLI
			"kubeconfig at ",         // the command saw the lease's kubeconfig
			"kobe run " + poolName + " --ttl 12m --heartbeat-timeout 2m -- sh -c <command>",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q", want)
			}
		}
		m := leaseLine.FindStringSubmatch(out)
		if m == nil {
			t.Fatal("the command printed no lease id")
		}
		if got := g.mintedAudiences(); len(got) != 1 || got[0] != op.APIURL {
			t.Errorf("OIDC tokens minted for audiences %q, want one for the endpoint %s", got, op.APIURL)
		}
		// The token went to kobe only: masked, never printed in clear.
		if strings.Count(out, "::add-mask::") != 1 {
			t.Errorf("want one ::add-mask:: line for the token")
		}
		installed := filepath.Join(r.env["RUNNER_TEMP"], "kobe-"+release+"-"+runtime.GOOS+"-"+runtime.GOARCH)
		if b, err := os.ReadFile(r.env["GITHUB_PATH"]); err != nil || strings.TrimSpace(string(b)) != installed {
			t.Errorf("GITHUB_PATH holds %q (%v), want %s", b, err, installed)
		}
		// The lease, as the operator recorded it: this caller's identity
		// from the token's claims, the requested TTL, released at the end.
		testenv.Eventually(t, 30*time.Second, "the lease to be released", func() error {
			l := &kobev1.ClusterLease{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: m[1]}, l); err != nil {
				return err
			}
			if l.Spec.Requester.Identity != callerRepo || l.Spec.Requester.Method != "oidc" || l.Spec.Requester.Policy != policy.Name {
				return fmt.Errorf("requester %+v, want %s by oidc under %s", l.Spec.Requester, callerRepo, policy.Name)
			}
			if l.Spec.TTL == nil || l.Spec.TTL.Duration != 12*time.Minute {
				return fmt.Errorf("ttl %v, want 12m", l.Spec.TTL)
			}
			if l.Spec.HeartbeatTimeout == nil || l.Spec.HeartbeatTimeout.Duration != 2*time.Minute {
				return fmt.Errorf("heartbeatTimeout %v, want the input's 2m", l.Spec.HeartbeatTimeout)
			}
			if l.Status.BoundAt == nil || l.Status.EndedAt == nil || l.Status.Phase == kobev1.LeaseBound {
				return fmt.Errorf("phase %s, bound at %v, ended at %v: want bound, then ended", l.Status.Phase, l.Status.BoundAt, l.Status.EndedAt)
			}
			return nil
		})
	})

	// A command that outlives its ID token: the refresher keeps the token
	// file fresh, so kobe's release at the end is accepted and the lease
	// ends Released, not at its TTL. Each token here lives 5 s and every
	// third token request fails, which the refresher reports and survives.
	// The command takes 8 s after the lease is bound, or is cancelled (a
	// SIGTERM to the whole step, refresher included) after 7 s.
	const life = 5 * time.Second
	for _, tc := range []struct {
		name    string
		command string
		cancel  time.Duration
		code    int
	}{
		{name: "a command that outlives its token still releases the lease", command: "sleep 8"},
		{name: "a job cancelled after its first token died still releases the lease", command: "sleep 60", cancel: 7 * time.Second, code: 143},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g.mu.Lock()
			g.requests = 0
			g.mu.Unlock()
			g.life.Store(int64(life))
			g.hiccups.Store(true)
			defer func() {
				g.life.Store(0)
				g.hiccups.Store(false)
			}()
			minted := len(g.mintedAudiences())
			r := newRunner(t, g, op.APIURL)
			r.env["KOBE_ACTION_TTL"] = "12m"
			r.env["KOBE_ACTION_TOKEN_REFRESH"] = "1"
			r.env["KOBE_ACTION_COMMAND"] = `ls -l "$KOBE_TOKEN_FILE"; echo "lease=$KOBE_LEASE_ID"; ` + tc.command
			r.cancelAfter = tc.cancel
			started := time.Now()
			out, code := r.run(t)
			t.Logf("action output (%s):\n%s", time.Since(started).Round(time.Millisecond), out)
			if code != tc.code {
				t.Fatalf("exit status %d, want %d", code, tc.code)
			}
			m := leaseLine.FindStringSubmatch(out)
			if m == nil {
				t.Fatal("the command printed no lease id")
			}
			// The token file, as the command saw it: 0600, in RUNNER_TEMP;
			// gone after the step.
			f := regexp.MustCompile(`(?m)^(\S+) .* (\S+/token)$`).FindStringSubmatch(out)
			if f == nil {
				t.Fatal("the command listed no token file")
			}
			if f[1] != "-rw-------" || !strings.HasPrefix(f[2], r.env["RUNNER_TEMP"]+"/kobe-token.") {
				t.Errorf("token file %s with mode %s, want -rw------- in %s", f[2], f[1], r.env["RUNNER_TEMP"])
			}
			if _, err := os.Stat(f[2]); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("token file %s after the step: %v, want it removed", f[2], err)
			}
			// Tokens were minted while the command ran, each masked in the
			// log; the refused requests were warnings.
			n := len(g.mintedAudiences()) - minted
			t.Logf("%d tokens minted", n)
			if n < 2 {
				t.Errorf("%d tokens minted, want a new one every second while the command ran", n)
			}
			if masks := strings.Count(out, "::add-mask::"); masks != n {
				t.Errorf("%d ::add-mask:: lines for %d tokens", masks, n)
			}
			if !strings.Contains(out, "::warning title=kobe::refreshing the job's OIDC token (audience "+op.APIURL+") failed") {
				t.Errorf("no warning for the refused token requests")
			}
			if !strings.Contains(out, "kobe: released lease "+m[1]) || strings.Contains(out, "kobe: warning") {
				t.Errorf("kobe did not release lease %s cleanly", m[1])
			}
			testenv.Eventually(t, 30*time.Second, "the lease to end Released", func() error {
				l := &kobev1.ClusterLease{}
				if err := env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: m[1]}, l); err != nil {
					return err
				}
				c := meta.FindStatusCondition(l.Status.Conditions, kobev1.ConditionEnded)
				if c == nil || c.Status != metav1.ConditionTrue || c.Reason != kobev1.ReasonReleased {
					return fmt.Errorf("phase %s, Ended condition %+v: want ended by reason %s", l.Status.Phase, c, kobev1.ReasonReleased)
				}
				if l.Status.BoundAt == nil || l.Status.EndedAt == nil {
					return fmt.Errorf("bound at %v, ended at %v", l.Status.BoundAt, l.Status.EndedAt)
				}
				if held := l.Status.EndedAt.Sub(l.Status.BoundAt.Time); held < life {
					return fmt.Errorf("held %s, want longer than a token lives (%s)", held, life)
				}
				return nil
			})
		})
	}

	// vX picks the newest vX.Y.Z release that is neither a draft nor a
	// pre-release (v0.10.0 is a draft here, so v0.9.1).
	t.Run("a major version installs its newest release", func(t *testing.T) {
		r := newRunner(t, g, op.APIURL)
		r.env["KOBE_ACTION_VERSION"] = "v0"
		r.env["KOBE_ACTION_COMMAND"] = "true"
		out, code := r.run(t)
		if code != 0 || !strings.Contains(out, "kobe "+release+" (") {
			t.Errorf("exit %d, want 0 and kobe %s installed; output:\n%s", code, release, out)
		}
	})

	// The load input: kobe load runs with the lease before the command,
	// and its failure (a sim member has no nodes) fails the step without
	// running the command; the lease is released all the same.
	t.Run("a load the cluster refuses fails the step before the command", func(t *testing.T) {
		r := newRunner(t, g, op.APIURL)
		img, err := random.Image(1024, 1)
		if err != nil {
			t.Fatal(err)
		}
		tag, err := name.NewTag("app:dev")
		if err != nil {
			t.Fatal(err)
		}
		if err := tarball.WriteToFile(filepath.Join(r.work, "app.tar"), tag, img); err != nil {
			t.Fatal(err)
		}
		r.env["KOBE_ACTION_LOAD"] = "app.tar"
		// What the command prints is not in its text, which kobe run shows.
		r.env["KOBE_ACTION_COMMAND"] = `echo "the command ran: $((6 * 7))"`
		out, code := r.run(t)
		if code == 0 || !strings.Contains(out, "ImagesUnsupported") || !strings.Contains(out, "sim members never have nodes") || strings.Contains(out, "the command ran: 42") {
			t.Errorf("exit %d, want kobe load's refusal (ImagesUnsupported) without running the command; output:\n%s", code, out)
		}
	})

	// Each refusal: a clear message, a failed step, and no lease.
	before := len(leases(t, env.Client))
	for _, tc := range []struct {
		name string
		set  map[string]string
		tamp bool
		want string
	}{
		{name: "an archive that does not match SHA256SUMS is not installed", tamp: true,
			want: "checksum mismatch: kobe_" + release + "_" + runtime.GOOS + "_" + runtime.GOARCH + ".tar.gz does not match the SHA256SUMS of " + release + "; refusing to install it"},
		{name: "a version that is no release", set: map[string]string{"KOBE_ACTION_VERSION": "main"},
			want: "version 'main' names no kobe release"},
		{name: "a release that is not published", set: map[string]string{"KOBE_ACTION_VERSION": "v0.9.0"},
			want: "downloading " + g.URL + "/" + repository + "/releases/download/v0.9.0/kobe_v0.9.0_"},
		{name: "a major version without releases", set: map[string]string{"KOBE_ACTION_VERSION": "v2"},
			want: repository + " has no release matching 'v2'"},
		{name: "a job without id-token: write", set: map[string]string{"ACTIONS_ID_TOKEN_REQUEST_URL": "", "ACTIONS_ID_TOKEN_REQUEST_TOKEN": ""},
			want: "add 'permissions: id-token: write' to the workflow or job"},
		{name: "a refused token request", set: map[string]string{"ACTIONS_ID_TOKEN_REQUEST_TOKEN": "stale"},
			want: "requesting the job's OIDC token (audience " + op.APIURL + ") failed"},
		{name: "an audience the policy does not accept", set: map[string]string{"KOBE_ACTION_AUDIENCE": "https://other.example.com"},
			want: "the server did not accept your credentials"},
		{name: "no endpoint", set: map[string]string{"KOBE_ACTION_ENDPOINT": ""},
			want: "no kobe endpoint: set the endpoint input"},
		{name: "no pool", set: map[string]string{"KOBE_ACTION_POOL": ""},
			want: "the pool input is empty"},
		{name: "a load archive that is not there", set: map[string]string{"KOBE_ACTION_LOAD": "missing.tar"},
			want: "the load input names missing.tar, which is no file here"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g.tamper.Store(tc.tamp)
			defer g.tamper.Store(false)
			r := newRunner(t, g, op.APIURL)
			r.env["KOBE_ACTION_COMMAND"] = "echo the command ran"
			for k, v := range tc.set {
				r.env[k] = v
			}
			out, code := r.run(t)
			if code == 0 || !strings.Contains(out, tc.want) || strings.Contains(out, "the command ran") {
				t.Errorf("exit %d, want a failure saying %q without running the command; output:\n%s", code, tc.want, out)
			}
		})
	}
	if after := len(leases(t, env.Client)); after != before {
		t.Errorf("%d leases after the refused runs, %d before", after, before)
	}
}

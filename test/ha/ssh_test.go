//go:build heavy

package ha

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/cli"
	"github.com/kunobi-ninja/kobe/internal/replay"
	"github.com/kunobi-ninja/kobe/internal/sshsig"
	"github.com/kunobi-ninja/kobe/internal/sshsig/sshsigtest"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestSSHReplayToTheOtherReplica: both replicas publish the same audience
// (derived from the namespace), a request signed by a real ssh-agent and
// accepted by one replica is refused by the other and by itself when
// replayed, no second lease comes of it, and the leader's janitor deletes
// the nonce object once the signature's window has passed.
func TestSSHReplayToTheOtherReplica(t *testing.T) {
	c := startCluster(t, clusterOptions{})
	c.createSimPool(t, "sim", 2, 0)
	c.waitPoolReady(t, "sim", 1)

	agent := sshsigtest.StartAgent(t)
	keyPath, pub := agent.Keygen("ed25519", "alice@laptop")
	agent.Add(keyPath)
	if err := suite.env.Client.Create(t.Context(), &kobev1.AccessPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "ssh-users", Namespace: c.ns},
		Spec: kobev1.AccessPolicySpec{
			Auth:  kobev1.AuthSpec{SSH: &kobev1.SSHAuth{AuthorizedKeys: []string{pub}}},
			Rules: []kobev1.AccessRule{{Pools: []string{"sim"}}},
		},
	}); err != nil {
		t.Fatal(err)
	}

	var ns corev1.Namespace
	if err := suite.env.Client.Get(t.Context(), client.ObjectKey{Name: c.ns}, &ns); err != nil {
		t.Fatal(err)
	}
	want := "kobe:" + c.ns + ":" + string(ns.UID)
	for i := range c.replicas {
		code, body := c.call(t, i, http.MethodGet, "/v1/status", "", nil)
		var st wire.Status
		if err := json.Unmarshal(body, &st); err != nil || code != http.StatusOK {
			t.Fatalf("r%d status: %d %s", i, code, body)
		}
		if st.Auth.Audience != want {
			t.Fatalf("r%d publishes audience %q, want %q", i, st.Auth.Audience, want)
		}
	}
	alice := apiclient.SSHAgent{Socket: agent.Socket, KeyFilter: pub, Audience: want}

	// signed signs method path body for replica i, as the CLI does.
	signed := func(i int, method, path string, body []byte) *http.Request {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, c.replica(i).APIURL+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if err := alice.Apply(req, body); err != nil {
			t.Fatal(err)
		}
		return req
	}
	// resend sends the signed header and body to replica i.
	resend := func(i int, orig *http.Request, body []byte) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), orig.Method, c.replica(i).APIURL+orig.URL.Path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", orig.Header.Get("Authorization"))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("r%d: %v", i, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Both replicas' caches hold the new policy.
	for i := range c.replicas {
		testenv.Eventually(t, 30*time.Second, fmt.Sprintf("r%d to accept alice's key", i), func() error {
			if code, body := resend(i, signed(i, http.MethodGet, "/v1/whoami", nil), nil); code != http.StatusOK {
				return fmt.Errorf("whoami: %d %s", code, body)
			}
			return nil
		})
	}

	body := []byte(`{"pool":"sim","ttl":"10m"}`)
	req := signed(0, http.MethodPost, "/v1/leases", body)
	if code, got := resend(0, req, body); code != http.StatusCreated && code != http.StatusAccepted {
		t.Fatalf("signed POST on r0: %d %s", code, got)
	}
	for _, i := range []int{1, 0} {
		code, got := resend(i, req, body)
		if code != http.StatusUnauthorized || !strings.Contains(got, "already used") {
			t.Fatalf("the same signed POST replayed to r%d: %d %s; want 401 already used", i, code, got)
		}
	}
	if n := len(c.leases(t)); n != 1 {
		t.Fatalf("%d leases after one signed POST and two replays, want 1", n)
	}
	// Signed for another installation: refused by either replica.
	other := apiclient.SSHAgent{Socket: agent.Socket, KeyFilter: pub, Audience: "kobe:another:installation"}
	oreq, err := http.NewRequestWithContext(t.Context(), http.MethodPost, c.replica(1).APIURL+"/v1/leases", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Apply(oreq, body); err != nil {
		t.Fatal(err)
	}
	if code, got := resend(1, oreq, body); code != http.StatusUnauthorized || !strings.Contains(got, "another server") {
		t.Fatalf("signature for another audience on r1: %d %s", code, got)
	}

	// The CLI against the real operator: it reads the audience, pins it,
	// and its signed requests are accepted on either replica.
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	for _, k := range []string{"KOBE_CONTEXT", "KOBE_ENDPOINT", "KOBE_TOKEN", "KOBE_OIDC_TOKEN", "KOBE_TOKEN_FILE"} {
		t.Setenv(k, "")
	}
	t.Setenv("KOBE_CONFIG", cfgPath)
	t.Setenv("SSH_AUTH_SOCK", agent.Socket)
	kobe := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := cli.Execute(t.Context(), args, cli.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
		return code, out.String() + errOut.String()
	}
	if code, out := kobe("config", "set", "ha", "--endpoint", c.replica(1).APIURL, "--auth", "ssh", "--ssh-key", keyPath+".pub"); code != 0 {
		t.Fatalf("kobe config set: %s", out)
	}
	if code, out := kobe("whoami"); code != 0 || !strings.Contains(out, "alice@laptop") || !strings.Contains(out, "Pinned the SSH audience") {
		t.Fatalf("kobe whoami against r1: exit %d\n%s", code, out)
	}
	cfg, err := cli.LoadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Context("ha").SSHAudience; got != want {
		t.Fatalf("the CLI pinned %q, want %q", got, want)
	}
	if code, out := kobe("leases", "--endpoint", c.replica(0).APIURL); code != 0 {
		t.Fatalf("kobe leases against r0: exit %d\n%s", code, out)
	}

	// The nonce is an object in the namespace until the leader's janitor
	// deletes it, a window (30s) plus at most one sweep interval (30s)
	// after signing.
	h, err := sshsig.ParseHeader(req.Header.Get("Authorization"))
	if err != nil {
		t.Fatal(err)
	}
	name := replay.Name(sshsig.NonceID(h))
	var l coordinationv1.Lease
	if err := suite.env.Client.Get(t.Context(), client.ObjectKey{Namespace: c.ns, Name: name}, &l); err != nil {
		t.Fatalf("nonce object %s: %v", name, err)
	}
	signedAt := time.Unix(h.Timestamp, 0)
	testenv.Eventually(t, sshsig.DefaultWindow+replay.DefaultJanitorInterval+time.Minute, "the janitor to delete the nonce object", func() error {
		err := suite.env.Client.Get(t.Context(), client.ObjectKey{Namespace: c.ns, Name: name}, &l)
		if err == nil {
			return fmt.Errorf("nonce object %s still exists %s after signing", name, time.Since(signedAt).Round(time.Second))
		}
		return client.IgnoreNotFound(err)
	})
	t.Logf("nonce object deleted %s after signing (window %s, sweep every %s)", time.Since(signedAt).Round(time.Second), sshsig.DefaultWindow, replay.DefaultJanitorInterval)
}

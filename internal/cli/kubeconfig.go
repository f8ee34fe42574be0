package cli

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kunobi-ninja/kobe/internal/wire"
)

// validateLeaseRef checks a lease ID or alias as the server does, which
// also keeps what ends up in file names and URLs harmless.
func validateLeaseRef(ref string) error {
	if err := wire.ValidateLeaseRef(ref); err != nil {
		return fmt.Errorf("%q is neither a lease ID (like lease-a1b2c3d4e5f6) nor an alias: `kobe leases` lists yours", ref)
	}
	return nil
}

// poolNamePattern is a Kubernetes object name.
var poolNamePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

func validatePoolName(pool string) error {
	if pool == "" {
		return fmt.Errorf("pool name is empty: `kobe pools` lists the pools you may use")
	}
	if len(pool) > 253 || !poolNamePattern.MatchString(pool) {
		return fmt.Errorf("%q is not a pool name: `kobe pools` lists the pools you may use", pool)
	}
	return nil
}

// kubeconfigHelp documents the default kubeconfig location for --help.
const kubeconfigHelp = `$XDG_RUNTIME_DIR/kobe/kubeconfig-<lease-id> when XDG_RUNTIME_DIR is set
(a per-user tmpfs that is wiped at logout), else
~/.cache/kobe/kubeconfig-<lease-id> (the user cache folder). Never the
current folder, so that a kubeconfig cannot be committed by accident.`

// defaultKubeconfigPath is where `kobe lease` writes a lease's kubeconfig
// unless --kubeconfig says otherwise; see kubeconfigHelp.
func defaultKubeconfigPath(getenv func(string) string, id string) (string, error) {
	if !wire.IsLeaseID(id) {
		return "", fmt.Errorf("%q is not a lease ID (like lease-a1b2c3d4e5f6)", id)
	}
	name := "kubeconfig-" + id
	if dir := getenv("XDG_RUNTIME_DIR"); dir != "" {
		return filepath.Join(dir, "kobe", name), nil
	}
	if dir := getenv("XDG_CACHE_HOME"); dir != "" {
		return filepath.Join(dir, "kobe", name), nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("finding a folder for the kubeconfig: %w; pass --kubeconfig PATH", err)
	}
	return filepath.Join(cache, "kobe", name), nil
}

// writeKubeconfig writes a server-sent kubeconfig with mode 0600, creating
// missing parent folders with mode 0700, once safeKubeconfig accepts it.
func writeKubeconfig(path, kubeconfig string) error {
	data, err := safeKubeconfig([]byte(kubeconfig))
	if err != nil {
		return err
	}
	if err := writeFileAtomic(path, data); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	return nil
}

// errUnsafeKubeconfig heads every refusal of safeKubeconfig.
var errUnsafeKubeconfig = errors.New("the server sent an unsafe kubeconfig and nothing was written")

// safeKubeconfig checks a kubeconfig the kobe API sent before anything
// writes it where kubectl will load it: kubectl runs an exec or
// auth-provider user's command, reads a tokenFile or certificate path from
// this machine, and sends requests through a proxy-url, so a hostile or
// compromised server could use a kubeconfig to run code on a CI runner or
// to read its files. Accepted: clusters whose server is https (no
// insecure-skip-tls-verify, no proxy, CA data inline) and users that
// authenticate with an inline client certificate and key, or a bearer
// token, and nothing else. It returns the checked config re-encoded, so
// that what is written is exactly what was checked.
func safeKubeconfig(data []byte) ([]byte, error) {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("%w: it does not parse as a kubeconfig: %w", errUnsafeKubeconfig, err)
	}
	var problems []string
	if len(cfg.Clusters) == 0 || len(cfg.AuthInfos) == 0 {
		problems = append(problems, "it names no cluster or no user")
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Clusters)) {
		problems = append(problems, clusterProblems(name, cfg.Clusters[name])...)
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.AuthInfos)) {
		problems = append(problems, userProblems(name, cfg.AuthInfos[name])...)
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Contexts)) {
		c := cfg.Contexts[name]
		if cfg.Clusters[c.Cluster] == nil || cfg.AuthInfos[c.AuthInfo] == nil {
			problems = append(problems, fmt.Sprintf("context %q names a cluster or user it does not define", name))
		}
	}
	if cfg.CurrentContext == "" || cfg.Contexts[cfg.CurrentContext] == nil {
		problems = append(problems, "its current-context names no context it defines")
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %s; kobe writes only kubeconfigs whose clusters are https servers and whose users authenticate with a client certificate or a bearer token: report this to whoever runs the kobe server", errUnsafeKubeconfig, strings.Join(problems, "; "))
	}
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: re-encoding it: %w", errUnsafeKubeconfig, err)
	}
	return out, nil
}

// clusterProblems says what makes a kubeconfig cluster unsafe to write.
func clusterProblems(name string, c *clientcmdapi.Cluster) []string {
	var out []string
	// The scheme must be written "https" exactly: url.Parse lowercases it,
	// and a check looser than what is later read leaves room to disagree.
	u, err := url.Parse(c.Server)
	if err != nil || !strings.HasPrefix(c.Server, "https://") || u.Host == "" {
		out = append(out, fmt.Sprintf("cluster %q has server %q, not an https:// URL", name, c.Server))
	}
	if c.InsecureSkipTLSVerify {
		out = append(out, fmt.Sprintf("cluster %q sets insecure-skip-tls-verify", name))
	}
	if c.ProxyURL != "" {
		out = append(out, fmt.Sprintf("cluster %q sets a proxy-url", name))
	}
	if c.CertificateAuthority != "" {
		out = append(out, fmt.Sprintf("cluster %q names a certificate-authority file on this machine", name))
	}
	return out
}

// userProblems says what makes a kubeconfig user unsafe to write: anything
// but an inline client certificate and key, or a bearer token.
func userProblems(name string, u *clientcmdapi.AuthInfo) []string {
	var out []string
	refuse := func(set bool, what string) {
		if set {
			out = append(out, fmt.Sprintf("user %q %s", name, what))
		}
	}
	refuse(u.Exec != nil, "runs a command (exec)")
	refuse(u.AuthProvider != nil, "uses an auth-provider plugin")
	refuse(u.TokenFile != "", "reads a tokenFile on this machine")
	refuse(u.ClientCertificate != "" || u.ClientKey != "", "reads a client certificate or key file on this machine")
	refuse(u.Impersonate != "" || u.ImpersonateUID != "" || len(u.ImpersonateGroups) > 0 || len(u.ImpersonateUserExtra) > 0, "impersonates another user (act-as)")
	refuse(u.Username != "" || u.Password != "", "uses a username and password")
	cert := len(u.ClientCertificateData) > 0 || len(u.ClientKeyData) > 0
	refuse(cert && (len(u.ClientCertificateData) == 0 || len(u.ClientKeyData) == 0), "has a client certificate without its key, or a key without its certificate")
	refuse(len(out) == 0 && !cert && u.Token == "", "has no client certificate and no token")
	return out
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		safe := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:@%,=", r)
		return !safe
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// reasonInstanceLost is the operator's reason for a lease whose cluster
// died, or was deleted, while it was held.
const reasonInstanceLost = "InstanceLost"

// leaseEndedWhy says what phase a lease is in and, when the server said why,
// why, in words for the end of a lease whose cluster was lost.
func leaseEndedWhy(l *wire.Lease) string {
	switch {
	case l.Reason == reasonInstanceLost:
		return fmt.Sprintf("lease %s is %s (%s): its cluster %s died or was deleted while leased; lease another one", l.ID, l.Phase, l.Reason, dash(l.ClusterName))
	case l.Reason != "":
		return fmt.Sprintf("lease %s is %s (%s)", l.ID, l.Phase, l.Reason)
	}
	return fmt.Sprintf("lease %s is %s", l.ID, l.Phase)
}

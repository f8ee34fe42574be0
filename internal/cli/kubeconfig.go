package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

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

// writeKubeconfig writes a kubeconfig with mode 0600, creating missing
// parent folders with mode 0700.
func writeKubeconfig(path, kubeconfig string) error {
	if err := writeFileAtomic(path, []byte(kubeconfig)); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	return nil
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

package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Authentication methods a context may name with `auth`.
const (
	AuthToken          = "token"
	AuthSSH            = "ssh"
	AuthOIDC           = "oidc"
	AuthServiceAccount = "serviceaccount"
	// AuthLogin is a person's OIDC login made by `kobe login`: its ID
	// token, refreshed when it expires, is kept beside the config file.
	AuthLogin = "login"
)

var authMethods = []string{AuthToken, AuthSSH, AuthOIDC, AuthServiceAccount, AuthLogin}

// normalizeAuth checks an auth method name, case-insensitively
// ("serviceAccount" is accepted), and returns its canonical spelling.
func normalizeAuth(auth string) (string, error) {
	a := strings.ToLower(strings.TrimSpace(auth))
	if a == "" || slices.Contains(authMethods, a) {
		return a, nil
	}
	return "", fmt.Errorf("unknown auth method %q: use one of %s", auth, strings.Join(authMethods, ", "))
}

// Config is the CLI's config file: named contexts, one of them current.
type Config struct {
	// CurrentContext names the context used when --context is not given.
	CurrentContext string `json:"current-context,omitempty"`
	// Contexts are the known kobe API endpoints with their credentials.
	Contexts []Context `json:"contexts,omitempty"`
	// SSHAudiences pins the SSH audience of endpoints used without a
	// context of their own (KOBE_ENDPOINT, --endpoint).
	SSHAudiences []PinnedAudience `json:"ssh-audiences,omitempty"`
}

// PinnedAudience is the SSH audience an endpoint published on first use.
type PinnedAudience struct {
	Endpoint string `json:"endpoint"`
	Audience string `json:"audience"`
}

// Context is one kobe API endpoint and how to authenticate to it.
type Context struct {
	Name     string `json:"name"`
	Endpoint string `json:"endpoint"`
	// Auth is token, ssh, oidc or serviceaccount; empty means token when a
	// token is set and none otherwise.
	Auth      string `json:"auth,omitempty"`
	Token     string `json:"token,omitempty"`
	TokenFile string `json:"token-file,omitempty"`
	// SSHKey picks the agent key: SHA256 fingerprint, comment or .pub path.
	SSHKey string `json:"ssh-key,omitempty"`
	// SSHAudience is the audience the endpoint published on first SSH use
	// (GET /v1/status); SSH signatures name it, and a server announcing
	// another one is refused.
	SSHAudience           string `json:"ssh-audience,omitempty"`
	CAFile                string `json:"ca-file,omitempty"`
	InsecureSkipTLSVerify bool   `json:"insecure-skip-tls-verify,omitempty"`
}

// Context returns the context called name, or nil.
func (c *Config) Context(name string) *Context {
	for i := range c.Contexts {
		if c.Contexts[i].Name == name {
			return &c.Contexts[i]
		}
	}
	return nil
}

// ContextNames lists the contexts' names.
func (c *Config) ContextNames() []string {
	names := make([]string, 0, len(c.Contexts))
	for _, ctx := range c.Contexts {
		names = append(names, ctx.Name)
	}
	return names
}

// DefaultConfigPath is $KOBE_CONFIG, else $XDG_CONFIG_HOME/kobe/config.yaml,
// else ~/.config/kobe/config.yaml.
func DefaultConfigPath(getenv func(string) string) (string, error) {
	if p := getenv("KOBE_CONFIG"); p != "" {
		return p, nil
	}
	if dir := getenv("XDG_CONFIG_HOME"); dir != "" {
		return filepath.Join(dir, "kobe", "config.yaml"), nil
	}
	home := getenv("HOME")
	if home == "" {
		var err error
		if home, err = os.UserHomeDir(); err != nil {
			return "", fmt.Errorf("finding the config file: %w; set KOBE_CONFIG or pass --config", err)
		}
	}
	return filepath.Join(home, ".config", "kobe", "config.yaml"), nil
}

// LoadConfig reads the config file at path; a missing file is an empty
// config. It refuses unknown fields so that a typo does not silently drop a
// setting.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &Config{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading config file: %w", err)
	}
	cfg := &Config{}
	if err := yaml.UnmarshalStrict(data, cfg); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return cfg, nil
}

// configLooseMode reports whether the file at path holds a token and can be
// read by others than its owner.
func configLooseMode(path string, cfg *Config) (fs.FileMode, bool) {
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm()&0o077 == 0 {
		return 0, false
	}
	for _, c := range cfg.Contexts {
		if c.Token != "" {
			return info.Mode().Perm(), true
		}
	}
	return 0, false
}

// SaveConfig writes cfg to path with mode 0600 (its folder 0700), replacing
// the file atomically so that a crash never leaves half a config.
func SaveConfig(path string, cfg *Config) error {
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encoding config: %w", err)
	}
	return writeFileAtomic(path, data)
}

// writeFileAtomic writes data to path with mode 0600 through a temporary
// file in the same folder, creating the folder (0700) when needed.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if err := tmp.Chmod(0o600); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
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

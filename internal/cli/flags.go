package cli

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"

	"github.com/spf13/pflag"

	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/version"
)

// ConfigFlags are the global flags that say which kobe API to call and how
// to authenticate, like kubectl's ConfigFlags. Precedence: flags, then
// environment variables, then the selected context of the config file.
type ConfigFlags struct {
	ConfigPath            string
	Context               string
	Endpoint              string
	Token                 string
	TokenFile             string
	Auth                  string
	SSHKey                string
	CAFile                string
	InsecureSkipTLSVerify bool
	// Insecure allows a plain-HTTP endpoint beyond loopback.
	Insecure bool

	// Getenv reads the environment (os.Getenv unless a test says otherwise).
	Getenv func(string) string

	flags *pflag.FlagSet
}

// NewConfigFlags returns ConfigFlags that read the process environment.
func NewConfigFlags() *ConfigFlags {
	return &ConfigFlags{Getenv: os.Getenv}
}

// AddFlags registers the global flags.
func (f *ConfigFlags) AddFlags(fs *pflag.FlagSet) {
	f.flags = fs
	fs.StringVar(&f.ConfigPath, "config", "", "config file (default $KOBE_CONFIG, else ~/.config/kobe/config.yaml)")
	fs.StringVar(&f.Context, "context", "", "context of the config file to use (default: its current-context; env KOBE_CONTEXT)")
	fs.StringVar(&f.Endpoint, "endpoint", "", "kobe API URL, e.g. https://kobe.example.com (env KOBE_ENDPOINT)")
	fs.StringVar(&f.Token, "token", "", "bearer token (env KOBE_TOKEN, or KOBE_OIDC_TOKEN for an OIDC ID token)")
	fs.StringVar(&f.TokenFile, "token-file", "", "file holding the bearer token, read on every request (env KOBE_TOKEN_FILE)")
	fs.StringVar(&f.Auth, "auth", "", "authentication method: token, ssh, oidc or serviceaccount")
	fs.StringVar(&f.SSHKey, "ssh-key", "", "with --auth ssh: agent key to sign with (SHA256:... fingerprint, comment, or path of a .pub file)")
	fs.StringVar(&f.CAFile, "ca-file", "", "PEM file of the CA that signed the API's TLS certificate")
	fs.BoolVar(&f.InsecureSkipTLSVerify, "insecure-skip-tls-verify", false, "do not verify the API's TLS certificate (insecure)")
	fs.BoolVar(&f.Insecure, "insecure", false, "allow an http:// endpoint that is not on this machine: credentials and kubeconfigs then cross the network in the clear")
}

func (f *ConfigFlags) changed(name string) bool {
	return f.flags != nil && f.flags.Changed(name)
}

func (f *ConfigFlags) getenv(key string) string {
	if f.Getenv == nil {
		return os.Getenv(key)
	}
	return f.Getenv(key)
}

// configPath is --config, else the default path.
func (f *ConfigFlags) configPath() (string, error) {
	if f.ConfigPath != "" {
		return f.ConfigPath, nil
	}
	return DefaultConfigPath(f.getenv)
}

// loadConfig reads the config file and warns on warn when it holds a token
// but others can read it.
func (f *ConfigFlags) loadConfig(warn io.Writer) (string, *Config, error) {
	path, err := f.configPath()
	if err != nil {
		return "", nil, err
	}
	cfg, err := LoadConfig(path)
	if err != nil {
		return "", nil, err
	}
	if mode, loose := configLooseMode(path, cfg); loose && warn != nil {
		warnf(warn, "warning: %s holds tokens but has mode %04o; run: chmod 600 %s\n", path, mode, path)
	}
	return path, cfg, nil
}

// Target is where and how to call the API, resolved from flags, environment
// and config file.
type Target struct {
	// ContextName is the config context used, if any.
	ContextName string
	Endpoint    string
	// AuthMethod names the credentials kind, for messages ("none" without).
	AuthMethod            string
	Credentials           apiclient.Credentials
	CAFile                string
	InsecureSkipTLSVerify bool
}

// errNoEndpoint is what to fix when no endpoint is configured.
var errNoEndpoint = errors.New("no endpoint configured: run `kobe config set NAME --endpoint URL` or set KOBE_ENDPOINT")

// Resolve works out the Target from the flags, the environment and cfg.
func (f *ConfigFlags) Resolve(cfg *Config) (*Target, error) {
	ctxName := f.Context
	if ctxName == "" {
		ctxName = f.getenv("KOBE_CONTEXT")
	}
	explicitCtx := ctxName != ""
	if ctxName == "" {
		ctxName = cfg.CurrentContext
	}
	kctx := &Context{}
	if ctxName != "" {
		found := cfg.Context(ctxName)
		switch {
		case found != nil:
			kctx = found
		case explicitCtx:
			return nil, fmt.Errorf("no context %q in the config file (have: %v): create it with `kobe config set %s --endpoint URL`",
				ctxName, cfg.ContextNames(), ctxName)
		default:
			return nil, fmt.Errorf("current-context %q is not in the config file: run `kobe config use NAME` with one of %v", ctxName, cfg.ContextNames())
		}
	}

	t := &Target{ContextName: kctx.Name}
	switch {
	case f.Endpoint != "":
		t.Endpoint = f.Endpoint
	case f.getenv("KOBE_ENDPOINT") != "":
		t.Endpoint = f.getenv("KOBE_ENDPOINT")
	default:
		t.Endpoint = kctx.Endpoint
	}
	if t.Endpoint == "" {
		return nil, errNoEndpoint
	}
	u, err := apiclient.ParseEndpoint(t.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("%w: fix it with --endpoint, KOBE_ENDPOINT or `kobe config set`", err)
	}
	if err := checkPlainHTTP(u, f.Insecure); err != nil {
		return nil, err
	}

	t.CAFile = kctx.CAFile
	if f.CAFile != "" {
		t.CAFile = f.CAFile
	}
	t.InsecureSkipTLSVerify = kctx.InsecureSkipTLSVerify
	if f.changed("insecure-skip-tls-verify") || f.InsecureSkipTLSVerify {
		t.InsecureSkipTLSVerify = f.InsecureSkipTLSVerify
	}

	t.AuthMethod, t.Credentials, err = f.credentials(kctx)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// credentials picks the credentials: --token, --token-file, an explicit
// --auth ssh|serviceaccount, then KOBE_TOKEN, KOBE_OIDC_TOKEN,
// KOBE_TOKEN_FILE, then the context's settings.
func (f *ConfigFlags) credentials(kctx *Context) (string, apiclient.Credentials, error) {
	flagAuth, err := normalizeAuth(f.Auth)
	if err != nil {
		return "", nil, err
	}
	ctxAuth, err := normalizeAuth(kctx.Auth)
	if err != nil {
		return "", nil, fmt.Errorf("context %q: %w", kctx.Name, err)
	}
	auth := flagAuth
	if auth == "" {
		auth = ctxAuth
	}
	bearer := func(tokenKind string) string {
		if auth == AuthOIDC {
			return AuthOIDC
		}
		return tokenKind
	}
	sshKey := f.SSHKey
	if sshKey == "" {
		sshKey = kctx.SSHKey
	}

	switch {
	case f.Token != "":
		return bearer(AuthToken), apiclient.BearerToken(f.Token), nil
	case f.TokenFile != "":
		return bearer(AuthToken), apiclient.BearerTokenFile(f.TokenFile), nil
	case flagAuth == AuthSSH:
		return sshCredentials(f.getenv("SSH_AUTH_SOCK"), sshKey)
	case flagAuth == AuthServiceAccount:
		return AuthServiceAccount, apiclient.BearerTokenFile(apiclient.DefaultServiceAccountTokenFile), nil
	}

	oidcEnv, tokenEnv, fileEnv := f.getenv("KOBE_OIDC_TOKEN"), f.getenv("KOBE_TOKEN"), f.getenv("KOBE_TOKEN_FILE")
	switch {
	case auth == AuthOIDC && oidcEnv != "":
		return AuthOIDC, apiclient.BearerToken(oidcEnv), nil
	case tokenEnv != "":
		return bearer(AuthToken), apiclient.BearerToken(tokenEnv), nil
	case oidcEnv != "":
		return AuthOIDC, apiclient.BearerToken(oidcEnv), nil
	case fileEnv != "":
		return bearer(AuthToken), apiclient.BearerTokenFile(fileEnv), nil
	}

	switch auth {
	case AuthSSH:
		return sshCredentials(f.getenv("SSH_AUTH_SOCK"), sshKey)
	case AuthLogin:
		creds, err := f.loginCredentials(kctx.Name)
		return AuthLogin, creds, err
	case AuthServiceAccount:
		file := kctx.TokenFile
		if file == "" {
			file = apiclient.DefaultServiceAccountTokenFile
		}
		return AuthServiceAccount, apiclient.BearerTokenFile(file), nil
	}
	switch {
	case kctx.Token != "":
		return bearer(AuthToken), apiclient.BearerToken(kctx.Token), nil
	case kctx.TokenFile != "":
		return bearer(AuthToken), apiclient.BearerTokenFile(kctx.TokenFile), nil
	case auth == AuthOIDC:
		return "", nil, errors.New("auth oidc needs an ID token: set KOBE_OIDC_TOKEN, or pass --token-file with a file your platform refreshes")
	case auth == AuthToken:
		return "", nil, errors.New("auth token needs a token: pass --token or --token-file, set KOBE_TOKEN, or run `kobe config set NAME --token T`")
	}
	return "none", apiclient.Anonymous{}, nil
}

// errNoCredentials is what to fix when a command needs credentials.
var errNoCredentials = errors.New("no credentials configured: run `kobe config set NAME --endpoint URL --token T` " +
	"(or --auth ssh|oidc|serviceaccount), or set KOBE_TOKEN")

// NewClient resolves the Target and returns a client of it. With
// needCredentials, a Target without credentials is an error that says how
// to configure them.
func (f *ConfigFlags) NewClient(warn io.Writer, needCredentials bool) (*apiclient.Client, *Target, error) {
	path, cfg, err := f.loadConfig(warn)
	if err != nil {
		return nil, nil, err
	}
	t, err := f.Resolve(cfg)
	if err != nil {
		return nil, nil, err
	}
	if _, anonymous := t.Credentials.(apiclient.Anonymous); anonymous && needCredentials {
		return nil, nil, errNoCredentials
	}
	opts := t.clientOptions()
	if err := pinSSHAudience(warn, path, cfg, t, opts); err != nil {
		return nil, nil, err
	}
	c, err := apiclient.New(t.Endpoint, t.Credentials, opts...)
	if err != nil {
		return nil, nil, err
	}
	return c, t, nil
}

// clientOptions are the API client's options of the Target (its TLS
// settings and the CLI's user agent), without its credentials.
func (t *Target) clientOptions() []apiclient.Option {
	opts := []apiclient.Option{apiclient.WithUserAgent("kobe-cli/" + version.Version)}
	if t.CAFile != "" {
		opts = append(opts, apiclient.WithCAFile(t.CAFile))
	}
	if t.InsecureSkipTLSVerify {
		opts = append(opts, apiclient.WithInsecureSkipTLSVerify(true))
	}
	return opts
}

// checkPlainHTTP refuses an http:// endpoint beyond loopback unless
// insecure (--insecure): the CLI sends its credentials with every request
// and gets cluster-admin kubeconfigs back, which must not cross a network
// in the clear by accident.
func checkPlainHTTP(u *url.URL, insecure bool) error {
	if u.Scheme != "http" || insecure || isLoopbackHost(u.Hostname()) {
		return nil
	}
	return fmt.Errorf("endpoint %s is plain http:// on another machine: your credentials and the kubeconfigs the server sends would cross the network in the clear; use its https:// URL, or pass --insecure if the network is yours", u.Redacted())
}

// isLoopbackHost reports whether host names only this machine: a loopback
// IP or "localhost".
func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

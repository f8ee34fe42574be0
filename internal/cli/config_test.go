package cli

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/kunobi-ninja/kobe/internal/apiclient"
)

func TestResolve(t *testing.T) {
	cfg := &Config{
		CurrentContext: "prod",
		Contexts: []Context{
			{Name: "prod", Endpoint: "https://prod.example.com", Token: "prod-token"},
			{Name: "dev", Endpoint: "https://dev.example.com", TokenFile: "/tokens/dev", CAFile: "/ca.pem", InsecureSkipTLSVerify: true},
			{Name: "ci", Endpoint: "https://ci.example.com", Auth: "oidc"},
			{Name: "pod", Endpoint: "https://kobe.kobe-system.svc", Auth: "serviceAccount"},
			{Name: "anon", Endpoint: "https://anon.example.com"},
			{Name: "tok", Endpoint: "https://tok.example.com", Auth: "token"},
			{Name: "weird", Endpoint: "https://weird.example.com", Auth: "kerberos"},
		},
	}
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		cfg      *Config
		wantErr  string
		endpoint string
		auth     string
		creds    apiclient.Credentials
		ca       string
		insecure bool
	}{
		{name: "current context", endpoint: "https://prod.example.com", auth: "token", creds: apiclient.BearerToken("prod-token")},
		{name: "--context", args: []string{"--context", "dev"}, endpoint: "https://dev.example.com", auth: "token",
			creds: apiclient.BearerTokenFile("/tokens/dev"), ca: "/ca.pem", insecure: true},
		{name: "KOBE_CONTEXT", env: map[string]string{"KOBE_CONTEXT": "dev"}, endpoint: "https://dev.example.com", auth: "token",
			creds: apiclient.BearerTokenFile("/tokens/dev"), ca: "/ca.pem", insecure: true},
		{name: "--context beats KOBE_CONTEXT", args: []string{"--context", "prod"}, env: map[string]string{"KOBE_CONTEXT": "dev"},
			endpoint: "https://prod.example.com", auth: "token", creds: apiclient.BearerToken("prod-token")},
		{name: "unknown --context", args: []string{"--context", "nope"}, wantErr: `no context "nope"`},
		{name: "dangling current-context", cfg: &Config{CurrentContext: "gone"}, wantErr: "kobe config use"},
		{name: "nothing configured", cfg: &Config{}, wantErr: "no endpoint configured: run `kobe config set NAME --endpoint URL` or set KOBE_ENDPOINT"},
		{name: "env only", cfg: &Config{}, env: map[string]string{"KOBE_ENDPOINT": "http://127.0.0.1:8080", "KOBE_TOKEN": "t"},
			endpoint: "http://127.0.0.1:8080", auth: "token", creds: apiclient.BearerToken("t")},
		{name: "env without token is anonymous", cfg: &Config{}, env: map[string]string{"KOBE_ENDPOINT": "http://127.0.0.1:8080"},
			endpoint: "http://127.0.0.1:8080", auth: "none", creds: apiclient.Anonymous{}},
		{name: "bad endpoint", cfg: &Config{}, env: map[string]string{"KOBE_ENDPOINT": "kobe.example.com"}, wantErr: "https://"},
		{name: "KOBE_ENDPOINT beats context", env: map[string]string{"KOBE_ENDPOINT": "https://other.example.com"},
			endpoint: "https://other.example.com", auth: "token", creds: apiclient.BearerToken("prod-token")},
		{name: "--endpoint beats KOBE_ENDPOINT", args: []string{"--endpoint", "https://flag.example.com"}, env: map[string]string{"KOBE_ENDPOINT": "https://other.example.com"},
			endpoint: "https://flag.example.com", auth: "token", creds: apiclient.BearerToken("prod-token")},
		{name: "KOBE_TOKEN beats context", env: map[string]string{"KOBE_TOKEN": "env-token"},
			endpoint: "https://prod.example.com", auth: "token", creds: apiclient.BearerToken("env-token")},
		{name: "--token beats KOBE_TOKEN", args: []string{"--token", "flag-token"}, env: map[string]string{"KOBE_TOKEN": "env-token"},
			endpoint: "https://prod.example.com", auth: "token", creds: apiclient.BearerToken("flag-token")},
		{name: "--token-file", args: []string{"--token-file", "/f"}, env: map[string]string{"KOBE_TOKEN": "env-token"},
			endpoint: "https://prod.example.com", auth: "token", creds: apiclient.BearerTokenFile("/f")},
		{name: "KOBE_TOKEN_FILE", args: []string{"--context", "anon"}, env: map[string]string{"KOBE_TOKEN_FILE": "/var/token"},
			endpoint: "https://anon.example.com", auth: "token", creds: apiclient.BearerTokenFile("/var/token")},
		{name: "KOBE_OIDC_TOKEN", args: []string{"--context", "anon"}, env: map[string]string{"KOBE_OIDC_TOKEN": "id-token"},
			endpoint: "https://anon.example.com", auth: "oidc", creds: apiclient.BearerToken("id-token")},
		{name: "oidc context prefers KOBE_OIDC_TOKEN", args: []string{"--context", "ci"}, env: map[string]string{"KOBE_OIDC_TOKEN": "id-token", "KOBE_TOKEN": "t"},
			endpoint: "https://ci.example.com", auth: "oidc", creds: apiclient.BearerToken("id-token")},
		{name: "oidc context without a token", args: []string{"--context", "ci"}, wantErr: "KOBE_OIDC_TOKEN"},
		{name: "token context without a token", args: []string{"--context", "tok"}, wantErr: "auth token needs a token"},
		{name: "serviceaccount context", args: []string{"--context", "pod"},
			endpoint: "https://kobe.kobe-system.svc", auth: "serviceaccount", creds: apiclient.BearerTokenFile(apiclient.DefaultServiceAccountTokenFile)},
		{name: "--auth serviceaccount beats KOBE_TOKEN", args: []string{"--auth", "serviceaccount"}, env: map[string]string{"KOBE_TOKEN": "t"},
			endpoint: "https://prod.example.com", auth: "serviceaccount", creds: apiclient.BearerTokenFile(apiclient.DefaultServiceAccountTokenFile)},
		{name: "ssh context", args: []string{"--context", "dev", "--auth", "ssh", "--ssh-key", "SHA256:x"}, env: map[string]string{"SSH_AUTH_SOCK": "/tmp/agent.sock", "KOBE_TOKEN": "t"},
			endpoint: "https://dev.example.com", auth: "ssh", creds: apiclient.SSHAgent{Socket: "/tmp/agent.sock", KeyFilter: "SHA256:x"}, ca: "/ca.pem", insecure: true},
		{name: "ssh key from the context", cfg: &Config{CurrentContext: "s", Contexts: []Context{{Name: "s", Endpoint: "https://s", Auth: "ssh", SSHKey: "me@laptop"}}},
			endpoint: "https://s", auth: "ssh", creds: apiclient.SSHAgent{KeyFilter: "me@laptop"}},
		{name: "unknown --auth", args: []string{"--auth", "kerberos"}, wantErr: `unknown auth method "kerberos"`},
		{name: "unknown auth in context", args: []string{"--context", "weird"}, wantErr: `context "weird": unknown auth method`},
		{name: "anonymous context", args: []string{"--context", "anon"}, endpoint: "https://anon.example.com", auth: "none", creds: apiclient.Anonymous{}},
		{name: "--ca-file and --insecure-skip-tls-verify=false override", args: []string{"--context", "dev", "--ca-file", "/other.pem", "--insecure-skip-tls-verify=false"},
			endpoint: "https://dev.example.com", auth: "token", creds: apiclient.BearerTokenFile("/tokens/dev"), ca: "/other.pem"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &ConfigFlags{Getenv: func(k string) string { return tt.env[k] }}
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			f.AddFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			c := cfg
			if tt.cfg != nil {
				c = tt.cfg
			}
			got, err := f.Resolve(c)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Endpoint != tt.endpoint || got.AuthMethod != tt.auth || !reflect.DeepEqual(got.Credentials, tt.creds) ||
				got.CAFile != tt.ca || got.InsecureSkipTLSVerify != tt.insecure {
				t.Errorf("got %+v", got)
			}
		})
	}
}

func TestDefaultConfigPath(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"KOBE_CONFIG": "/etc/kobe.yaml", "HOME": "/home/u"}, "/etc/kobe.yaml"},
		{map[string]string{"XDG_CONFIG_HOME": "/xdg", "HOME": "/home/u"}, "/xdg/kobe/config.yaml"},
		{map[string]string{"HOME": "/home/u"}, "/home/u/.config/kobe/config.yaml"},
	}
	for _, tt := range tests {
		got, err := DefaultConfigPath(func(k string) string { return tt.env[k] })
		if err != nil || got != tt.want {
			t.Errorf("env %v: got %q, %v; want %q", tt.env, got, err, tt.want)
		}
	}
}

func TestConfigSetUseView(t *testing.T) {
	e := newTestEnv(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	r := kobe(t, "config", "set", "prod")
	if r.code == 0 || !strings.Contains(r.stderr, "context prod is new: give its --endpoint URL") {
		t.Fatalf("new context without endpoint: %s", r)
	}
	r = kobe(t, "config", "set", "prod", "--endpoint", "https://kobe.example.com/", "--token", "s3cret", "--token-file", "/x")
	if r.code == 0 || !strings.Contains(r.stderr, "not both") {
		t.Fatalf("token and token file: %s", r)
	}

	mustKobe(t, "config", "set", "prod", "--endpoint", "https://kobe.example.com/", "--token", "s3cret")
	if got := fileMode(t, e.config); got != 0o600 {
		t.Errorf("config mode %o, want 600", got)
	}
	if got := fileMode(t, filepath.Dir(e.config)); got != 0o700 {
		t.Errorf("config folder mode %o, want 700", got)
	}
	mustKobe(t, "config", "set", "dev", "--endpoint", "https://dev.example.com", "--auth", "ssh", "--ssh-key", "SHA256:abc",
		"--ca-file", caFile, "--insecure-skip-tls-verify")

	cfg, err := LoadConfig(e.config)
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{CurrentContext: "prod", Contexts: []Context{
		{Name: "prod", Endpoint: "https://kobe.example.com", Token: "s3cret"},
		{Name: "dev", Endpoint: "https://dev.example.com", Auth: "ssh", SSHKey: "SHA256:abc", CAFile: caFile, InsecureSkipTLSVerify: true},
	}}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("config %+v\nwant %+v", cfg, want)
	}

	// Switching from a token to a token file forgets the token.
	mustKobe(t, "config", "set", "prod", "--token-file", tokenFile)
	cfg, _ = LoadConfig(e.config)
	if c := cfg.Context("prod"); c.Token != "" || c.TokenFile != tokenFile || c.Endpoint != "https://kobe.example.com" {
		t.Fatalf("after --token-file: %+v", c)
	}
	mustKobe(t, "config", "set", "prod", "--token", "s3cret")

	for _, args := range [][]string{{"config", "view"}, {"config", "view", "-o", "json"}} {
		r = mustKobe(t, args...)
		if strings.Contains(r.stdout, "s3cret") || !strings.Contains(r.stdout, redacted) {
			t.Errorf("%v must mask tokens: %s", args, r)
		}
	}

	r = kobe(t, "config", "use", "staging")
	if r.code == 0 || !strings.Contains(r.stderr, `no context "staging"`) {
		t.Fatalf("use unknown: %s", r)
	}
	r = mustKobe(t, "config", "use", "dev")
	if !strings.Contains(r.stdout, "Switched to context dev") {
		t.Errorf("use: %s", r)
	}
	cfg, _ = LoadConfig(e.config)
	if cfg.CurrentContext != "dev" {
		t.Errorf("current-context %q", cfg.CurrentContext)
	}
}

func TestConfigFileProblems(t *testing.T) {
	e := newTestEnv(t)
	if err := os.MkdirAll(filepath.Dir(e.config), 0o700); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(e.config, []byte("contexts:\n- name: a\n  endpoint: https://a\n  tokn: typo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := kobe(t, "leases")
	if r.code == 0 || !strings.Contains(r.stderr, "tokn") {
		t.Fatalf("unknown field must be reported: %s", r)
	}

	if err := os.WriteFile(e.config, []byte("current-context: a\ncontexts:\n- name: a\n  endpoint: http://127.0.0.1:1\n  token: t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(e.config, 0o644); err != nil {
		t.Fatal(err)
	}
	r = kobe(t, "config", "view")
	if !strings.Contains(r.stderr, "chmod 600") {
		t.Errorf("world-readable config with a token must warn: %s", r)
	}
}

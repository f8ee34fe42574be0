package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/oauth2"

	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/login"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

const (
	// loginTimeout bounds a login: the person has this long to approve.
	loginTimeout = 15 * time.Minute
	// issuerTimeout bounds one request to an OIDC issuer.
	issuerTimeout = 30 * time.Second
	// revokeTimeout bounds logout's revocation, which must not keep an
	// offline machine waiting.
	revokeTimeout = 15 * time.Second
)

// Hooks that tests replace: opening a URL in the person's browser, and
// whether this machine can show one.
var (
	openBrowser      = openInBrowser
	browserAvailable = hasLocalBrowser
)

// LoginOptions are the options of `kobe login`.
type LoginOptions struct {
	Device, Browser, NoBrowser bool
	Output                     string

	flags   *ConfigFlags
	streams IOStreams
}

// NewCmdLogin returns `kobe login`.
func NewCmdLogin(flags *ConfigFlags, streams IOStreams) *cobra.Command {
	o := &LoginOptions{flags: flags, streams: streams}
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Log in with your identity provider (OIDC) and keep the login for a context",
		Long: `Log in as a person. The server says which OIDC issuer and client to use
(GET /.well-known/kunobi-auth), so an endpoint is all kobe login needs:

  kobe login --endpoint https://kobe.example.com

The login is kept for the context (--context, else the current one when it
is of the endpoint, else a new context named after the endpoint's host,
which becomes current) in <config folder>/logins/<context>.json (mode
0600): its ID token is sent to the API and renewed with its refresh token
when it expires. 'kobe logout' revokes and forgets it.

Flows: --browser opens your browser at the issuer and waits for it to come
back to http://127.0.0.1:<random port> (authorization code with PKCE);
--device prints a URL and a code to enter on any device (no browser needed
here). Without either, the browser flow is used when this machine can show
a browser (macOS, Windows, or DISPLAY/WAYLAND_DISPLAY set and not an SSH
session) and --no-browser is not given, and the device flow otherwise.
--no-browser with --browser prints the URL instead of opening it.

Against a server that publishes no login, or with other credentials
configured (a token, an SSH key), kobe login checks those credentials
as 'kobe whoami' does and stores nothing.`,
		Example: `  kobe login --endpoint https://kobe.example.com
  kobe login --device                  # on a machine without a browser
  kobe login --context prod --browser --no-browser`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().BoolVar(&o.Device, "device", false, "log in with the device flow: a URL and a code to enter on any device")
	cmd.Flags().BoolVar(&o.Browser, "browser", false, "log in in a browser of this machine (authorization code + PKCE, redirect to 127.0.0.1)")
	cmd.Flags().BoolVar(&o.NoBrowser, "no-browser", false, "do not open a browser: print the URL (and prefer the device flow)")
	addOutputFlag(cmd, &o.Output)
	return cmd
}

// Validate checks the flags.
func (o *LoginOptions) Validate() error {
	if o.Device && o.Browser {
		return errors.New("give --device or --browser, not both")
	}
	return validateOutput(o.Output)
}

// Run logs in, or checks the configured credentials when the server
// publishes no login or other credentials are configured.
func (o *LoginOptions) Run(ctx context.Context) error {
	path, cfg, err := o.flags.loadConfig(o.streams.ErrOut)
	if err != nil {
		return err
	}
	asGiven := o.flags.Context
	name, created, err := o.contextFor(cfg)
	if err != nil {
		return err
	}
	o.flags.Context = name
	t, err := o.flags.Resolve(cfg)
	if err != nil {
		return err
	}
	// Discovery goes without credentials: the server needs none, and the
	// credentials this login replaces have no business there.
	anon, err := apiclient.New(t.Endpoint, apiclient.Anonymous{}, t.clientOptions()...)
	if err != nil {
		return err
	}
	disc, err := anon.LoginDiscovery(ctx)
	switch {
	case apiclient.IsNotFound(err) && t.AuthMethod != "none" && t.AuthMethod != AuthLogin:
		warnf(o.streams.ErrOut, "note: %s publishes no login for people; checking the credentials configured (%s) instead\n", t.Endpoint, t.AuthMethod)
		o.flags.Context = asGiven
		return o.whoami(ctx)
	case apiclient.IsNotFound(err):
		return fmt.Errorf("%s publishes no login for people (GET %s: 404): its operator sets --login-issuer for that; "+
			"or configure a token, SSH key or ID token with `kobe config set`", t.Endpoint, wire.LoginDiscoveryPath)
	case err != nil:
		return fmt.Errorf("reading the server's login (GET %s): %w", wire.LoginDiscoveryPath, err)
	case t.AuthMethod != "none" && t.AuthMethod != AuthLogin && !o.Device && !o.Browser:
		warnf(o.streams.ErrOut, "note: checking the credentials configured (%s); `kobe login --device` or `--browser` replaces them with a login at %s\n", t.AuthMethod, disc.Issuer)
		o.flags.Context = asGiven
		return o.whoami(ctx)
	}

	p, err := login.Discover(ctx, issuerClient(), login.Config{Issuer: disc.Issuer, ClientID: disc.ClientID, Scopes: disc.Scopes, AllowHTTP: o.flags.Insecure})
	if err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, loginTimeout)
	defer cancel()
	var tok *login.Token
	if o.useBrowser(p) {
		tok, err = p.Browser(lctx, o.openURL)
	} else {
		tok, err = p.Device(lctx, o.promptDevice)
	}
	if err != nil {
		return err
	}

	lp := loginPath(path, name)
	if err := saveLogin(lp, tok); err != nil {
		return err
	}
	kctx := cfg.Context(name)
	kctx.Auth, kctx.Token, kctx.TokenFile = AuthLogin, "", ""
	// A context named after the endpoint becomes current; one named with
	// --context or KOBE_CONTEXT only when there is no current context.
	if (created && asGiven == "" && o.flags.getenv("KOBE_CONTEXT") == "") || cfg.CurrentContext == "" {
		cfg.CurrentContext = name
	}
	if err := SaveConfig(path, cfg); err != nil {
		return err
	}
	for _, env := range []string{"KOBE_TOKEN", "KOBE_OIDC_TOKEN", "KOBE_TOKEN_FILE"} {
		if o.flags.getenv(env) != "" {
			warnf(o.streams.ErrOut, "note: %s is set and overrides this login; unset it to use the login\n", env)
		}
	}

	creds, err := o.flags.loginCredentials(name)
	if err != nil {
		return err
	}
	c, err := apiclient.New(t.Endpoint, creds, t.clientOptions()...)
	if err != nil {
		return err
	}
	who, err := c.WhoAmI(ctx)
	if apiclient.IsUnauthorized(err) {
		return fmt.Errorf("logged in at %s, but %s refuses the ID token: an AccessPolicy of method oidc must trust issuer %s with audience %s (docs/login.md): %w",
			disc.Issuer, t.Endpoint, disc.Issuer, disc.ClientID, err)
	}
	if err != nil {
		return err
	}
	if o.Output == OutputJSON {
		return printJSON(o.streams.Out, who)
	}
	_, err = fmt.Fprintf(o.streams.Out, "Logged in to %s as %s (context %s; pools: %s)\n", t.Endpoint, who.Identity, name, dash(strings.Join(who.Pools, ", ")))
	return err
}

// contextFor names the context the login is for: --context or
// KOBE_CONTEXT; else, with --endpoint or KOBE_ENDPOINT, the current context
// or another one of that endpoint, or a new one named after its host;
// else the current context. created says the context is new (and is
// added to cfg).
func (o *LoginOptions) contextFor(cfg *Config) (name string, created bool, err error) {
	f := o.flags
	endpoint := f.Endpoint
	if endpoint == "" {
		endpoint = f.getenv("KOBE_ENDPOINT")
	}
	var u string
	if endpoint != "" {
		parsed, err := apiclient.ParseEndpoint(endpoint)
		if err != nil {
			return "", false, err
		}
		u = parsed.String()
		name = parsed.Host
	}
	switch {
	case f.Context != "":
		name = f.Context
	case f.getenv("KOBE_CONTEXT") != "":
		name = f.getenv("KOBE_CONTEXT")
	case u == "" && cfg.CurrentContext != "":
		name = cfg.CurrentContext
	case u == "":
		return "", false, errNoEndpoint
	default:
		// The current context when it is of this endpoint, else the first
		// one that is, else one named after the host.
		if cur := cfg.Context(cfg.CurrentContext); cur != nil && cur.Endpoint == u {
			name = cur.Name
		} else if i := slices.IndexFunc(cfg.Contexts, func(c Context) bool { return c.Endpoint == u }); i >= 0 {
			name = cfg.Contexts[i].Name
		}
		if c := cfg.Context(name); c != nil && c.Endpoint != u {
			return "", false, fmt.Errorf("context %s already names %s: pass --context NAME for %s", name, c.Endpoint, u)
		}
	}
	if name == "" || strings.ContainsAny(name, " \t\n/\\") {
		return "", false, fmt.Errorf("context name %q must be non-empty, without spaces or slashes", name)
	}
	c := cfg.Context(name)
	if c == nil {
		if u == "" {
			return "", false, fmt.Errorf("context %s is new: give its --endpoint URL", name)
		}
		cfg.Contexts = append(cfg.Contexts, Context{Name: name, Endpoint: u})
		created = true
	}
	if err := applyContextFlags(cfg, name, f); err != nil {
		return "", false, err
	}
	return name, created, nil
}

func (o *LoginOptions) useBrowser(p *login.Provider) bool {
	switch {
	case o.Browser:
		return true
	case o.Device:
		return false
	case !p.CanDevice():
		return true
	case !p.CanBrowser():
		return false
	}
	return !o.NoBrowser && browserAvailable(o.flags.getenv)
}

func (o *LoginOptions) promptDevice(da *oauth2.DeviceAuthResponse) error {
	warnf(o.streams.ErrOut, "To log in, open %s and enter the code %s\n", da.VerificationURI, da.UserCode)
	if da.VerificationURIComplete != "" {
		warnf(o.streams.ErrOut, "(or open %s)\n", da.VerificationURIComplete)
	}
	warnf(o.streams.ErrOut, "Waiting for the login to be approved...\n")
	return nil
}

func (o *LoginOptions) openURL(u string) error {
	if o.NoBrowser {
		warnf(o.streams.ErrOut, "To log in, open this URL in a browser of this machine:\n  %s\nWaiting for the browser to come back...\n", u)
		return nil
	}
	warnf(o.streams.ErrOut, "Opening your browser to log in; if it does not open, open this URL on this machine:\n  %s\nWaiting for the browser to come back...\n", u)
	if err := openBrowser(u); err != nil {
		warnf(o.streams.ErrOut, "note: could not open a browser (%v)\n", err)
	}
	return nil
}

// whoami is `kobe whoami` with the configured credentials.
func (o *LoginOptions) whoami(ctx context.Context) error {
	return (&WhoAmIOptions{Output: o.Output, flags: o.flags, streams: o.streams}).Run(ctx)
}

// NewCmdLogout returns `kobe logout`.
func NewCmdLogout(flags *ConfigFlags, streams IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "logout",
		Short: "Revoke and forget the login of a context",
		Long: `Revoke the login's refresh token at its issuer (RFC 7009, when the issuer
has a revocation endpoint) and forget the login of the context (--context,
else the current one). Without the issuer (offline, or no revocation
endpoint) the login is forgotten here all the same, and kobe logout says
that the refresh token stays valid at the issuer until it expires.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLogout(cmd.Context(), flags, streams)
		},
	}
}

func runLogout(ctx context.Context, f *ConfigFlags, streams IOStreams) error {
	path, cfg, err := f.loadConfig(streams.ErrOut)
	if err != nil {
		return err
	}
	name := f.Context
	if name == "" {
		name = f.getenv("KOBE_CONTEXT")
	}
	if name == "" {
		name = cfg.CurrentContext
	}
	if name == "" {
		return errors.New("no context to log out of: pass --context NAME")
	}
	lp := loginPath(path, name)
	tok, err := loadLogin(lp)
	if err != nil {
		return err
	}
	if tok == nil {
		_, err := fmt.Fprintf(streams.Out, "Context %s holds no login\n", name)
		return err
	}
	revoked := false
	if tok.RefreshToken != "" {
		rctx, cancel := context.WithTimeout(ctx, revokeTimeout)
		defer cancel()
		p, err := login.Discover(rctx, issuerClient(), login.Config{Issuer: tok.Issuer, ClientID: tok.ClientID, AllowHTTP: f.Insecure})
		switch {
		case err != nil:
			warnf(streams.ErrOut, "warning: could not revoke the refresh token: %v\n", err)
		case !p.CanRevoke():
			warnf(streams.ErrOut, "warning: %s has no revocation endpoint\n", tok.Issuer)
		default:
			if err := p.Revoke(rctx, tok.RefreshToken); err != nil {
				warnf(streams.ErrOut, "warning: could not revoke the refresh token: %v\n", err)
			} else {
				revoked = true
			}
		}
		if !revoked {
			warnf(streams.ErrOut, "warning: the login is forgotten here, but its refresh token stays valid at %s until it expires\n", tok.Issuer)
		}
	}
	if err := os.Remove(lp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("forgetting the login: %w", err)
	}
	how := "forgotten here"
	if revoked {
		how = "refresh token revoked at " + tok.Issuer
	}
	_, err = fmt.Fprintf(streams.Out, "Logged out of context %s (%s)\n", name, how)
	return err
}

// loginPath is where the login of context name is kept: logins/<name>.json
// beside the config file.
func loginPath(configPath, name string) string {
	return filepath.Join(filepath.Dir(configPath), "logins", name+".json")
}

// loadLogin reads a kept login; nil when there is none.
func loadLogin(path string) (*login.Token, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the login: %w", err)
	}
	var tok login.Token
	if err := json.Unmarshal(data, &tok); err != nil {
		return nil, fmt.Errorf("login file %s: %w; run `kobe login` again", path, err)
	}
	return &tok, nil
}

// saveLogin writes tok to path with mode 0600 (its folder 0700), atomically.
func saveLogin(path string, tok *login.Token) error {
	data, err := json.MarshalIndent(tok, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the login: %w", err)
	}
	return writeFileAtomic(path, data)
}

// issuerClient talks to OIDC issuers: its own client, so that neither the
// API's credentials nor its CA settings ever reach an issuer.
func issuerClient() *http.Client {
	return &http.Client{Timeout: issuerTimeout}
}

// loginCredentials send the ID token of a kept login, renewed (and the
// renewal kept) when it expires.
type loginCredentials struct {
	context string
	src     *login.Source
}

// Apply sets the Authorization header.
func (c *loginCredentials) Apply(req *http.Request, body []byte) error {
	if c.src == nil {
		return fmt.Errorf("context %s is not logged in: run `kobe login --context %s`", c.context, c.context)
	}
	tok, err := c.src.IDToken(req.Context())
	if err != nil {
		return fmt.Errorf("renewing the login of context %s: %w", c.context, err)
	}
	return apiclient.BearerToken(tok).Apply(req, body)
}

// loginCredentials are the credentials of the login kept for context name.
func (f *ConfigFlags) loginCredentials(name string) (apiclient.Credentials, error) {
	if name == "" {
		return nil, errors.New("auth login needs a context: run `kobe login --endpoint URL`")
	}
	path, err := f.configPath()
	if err != nil {
		return nil, err
	}
	lp := loginPath(path, name)
	tok, err := loadLogin(lp)
	if err != nil || tok == nil {
		return &loginCredentials{context: name}, err
	}
	save := func(t *login.Token) error { return saveLogin(lp, t) }
	src := login.NewSource(tok, issuerClient(), f.Insecure, save)
	src.Load = func() (*login.Token, error) { return loadLogin(lp) }
	return &loginCredentials{context: name, src: src}, nil
}

// hasLocalBrowser reports whether a browser of this machine can likely
// be shown: not over SSH, and macOS, Windows or a graphical session.
func hasLocalBrowser(getenv func(string) string) bool {
	if getenv("SSH_CONNECTION") != "" || getenv("SSH_TTY") != "" {
		return false
	}
	switch runtime.GOOS {
	case "darwin", "windows":
		return true
	}
	return getenv("DISPLAY") != "" || getenv("WAYLAND_DISPLAY") != ""
}

// openInBrowser asks the desktop to open u.
func openInBrowser(u string) error {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", u)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", u)
	default:
		cmd = exec.Command("xdg-open", u)
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }()
	return nil
}

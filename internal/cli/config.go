package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/sshsig"
)

// NewCmdConfig returns `kobe config` and its subcommands.
func NewCmdConfig(flags *ConfigFlags, streams IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Manage the contexts (endpoints and credentials) of the config file",
		Long: `Manage the config file: named contexts, each an endpoint with its
credentials, and which one is current. The file is
$KOBE_CONFIG, else ~/.config/kobe/config.yaml (or --config), mode 0600.

Flags and environment variables override the file: --endpoint or
KOBE_ENDPOINT, --token or KOBE_TOKEN (KOBE_OIDC_TOKEN for an OIDC ID token),
--token-file or KOBE_TOKEN_FILE, --context or KOBE_CONTEXT.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newCmdConfigSet(flags, streams), newCmdConfigUse(flags, streams), newCmdConfigView(flags, streams))
	return cmd
}

// ConfigSetOptions are the options of `kobe config set`.
type ConfigSetOptions struct {
	Name string
	// SSHAudience, when set with --ssh-audience, replaces the pinned SSH
	// audience ("" forgets it, so that the next use pins it again).
	SSHAudience    string
	sshAudienceSet bool

	flags   *ConfigFlags
	streams IOStreams
}

func newCmdConfigSet(flags *ConfigFlags, streams IOStreams) *cobra.Command {
	o := &ConfigSetOptions{flags: flags, streams: streams}
	cmd := &cobra.Command{
		Use:   "set NAME",
		Short: "Create or update a context",
		Long: `Create the context NAME, or update the settings given as flags. The
first context becomes the current one.

Authentication (--auth):
  token           a bearer token from an AccessPolicy's Secret (--token or --token-file)
  oidc            an OIDC ID token: KOBE_OIDC_TOKEN at run time, or --token-file
  serviceaccount  the pod's ServiceAccount token (--token-file, default
                  ` + apiclient.DefaultServiceAccountTokenFile + `)
  ssh             a key of your SSH agent (SSH_AUTH_SOCK), chosen with --ssh-key
  login           a person's OIDC login, made by 'kobe login' (which sets it)

With ssh, the first use pins the audience the server publishes in GET
/v1/status and signatures name it; a server that later announces another
audience is refused. --ssh-audience replaces the pinned value after you
have confirmed a change with the server's administrators.`,
		Example: `  kobe config set prod --endpoint https://kobe.example.com --token-file ~/.kobe-token
  kobe config set dev --endpoint https://kobe.dev.example.com --auth ssh --ssh-key ~/.ssh/id_ed25519.pub
  kobe config set ci --endpoint https://kobe.example.com --auth oidc`,
		Args: exactArgs(1, "a context name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name = args[0]
			o.sshAudienceSet = cmd.Flags().Changed("ssh-audience")
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&o.SSHAudience, "ssh-audience", "", `SSH audience to pin for the context's endpoint ("" forgets the pinned one)`)
	return cmd
}

// Validate checks the options without reading the config file.
func (o *ConfigSetOptions) Validate() error {
	if o.Name == "" || strings.ContainsAny(o.Name, " \t\n/") {
		return fmt.Errorf("context name %q must be non-empty, without spaces or slashes", o.Name)
	}
	if o.flags.Token != "" && o.flags.TokenFile != "" {
		return fmt.Errorf("give --token or --token-file, not both")
	}
	if o.flags.Endpoint != "" {
		if _, err := apiclient.ParseEndpoint(o.flags.Endpoint); err != nil {
			return err
		}
	}
	if _, err := normalizeAuth(o.flags.Auth); err != nil {
		return err
	}
	if o.sshAudienceSet && o.SSHAudience != "" && !sshsig.ValidAudience(o.SSHAudience) {
		return fmt.Errorf("--ssh-audience must be 1 to %d printable ASCII characters, as the server publishes it in GET /v1/status", sshsig.MaxAudienceLen)
	}
	return nil
}

// Run updates the config file.
func (o *ConfigSetOptions) Run(context.Context) error {
	path, cfg, err := o.flags.loadConfig(nil)
	if err != nil {
		return err
	}
	if err := applyContextFlags(cfg, o.Name, o.flags); err != nil {
		return err
	}
	if o.sshAudienceSet {
		cfg.Context(o.Name).SSHAudience = o.SSHAudience
	}
	if err := SaveConfig(path, cfg); err != nil {
		return err
	}
	current := ""
	if cfg.CurrentContext == o.Name {
		current = " (current)"
	}
	_, err = fmt.Fprintf(o.streams.Out, "Context %s%s saved to %s\n", o.Name, current, path)
	return err
}

// applyContextFlags creates or updates context name in cfg from the flags
// that were given.
func applyContextFlags(cfg *Config, name string, f *ConfigFlags) error {
	c := cfg.Context(name)
	if c == nil {
		if f.Endpoint == "" {
			return fmt.Errorf("context %s is new: give its --endpoint URL", name)
		}
		cfg.Contexts = append(cfg.Contexts, Context{Name: name})
		c = &cfg.Contexts[len(cfg.Contexts)-1]
	}
	if f.Endpoint != "" {
		u, err := apiclient.ParseEndpoint(f.Endpoint)
		if err != nil {
			return err
		}
		if c.Endpoint != u.String() {
			// The pinned audience was the old endpoint's.
			c.SSHAudience = ""
		}
		c.Endpoint = u.String()
	}
	if f.changed("auth") {
		auth, err := normalizeAuth(f.Auth)
		if err != nil {
			return err
		}
		c.Auth = auth
	}
	switch {
	case f.Token != "":
		c.Token, c.TokenFile = f.Token, ""
	case f.TokenFile != "":
		file, err := absPath(f.TokenFile)
		if err != nil {
			return err
		}
		c.Token, c.TokenFile = "", file
	case f.changed("token") || f.changed("token-file"):
		c.Token, c.TokenFile = "", ""
	}
	if f.changed("ssh-key") {
		key := f.SSHKey
		if strings.ContainsRune(key, filepath.Separator) || strings.HasSuffix(key, ".pub") {
			var err error
			if key, err = absPath(key); err != nil {
				return err
			}
		}
		c.SSHKey = key
	}
	if f.changed("ca-file") {
		c.CAFile = ""
		if f.CAFile != "" {
			file, err := absPath(f.CAFile)
			if err != nil {
				return err
			}
			if _, err := os.Stat(file); err != nil {
				return fmt.Errorf("--ca-file: %w", err)
			}
			c.CAFile = file
		}
	}
	if f.changed("insecure-skip-tls-verify") {
		c.InsecureSkipTLSVerify = f.InsecureSkipTLSVerify
	}
	if cfg.CurrentContext == "" {
		cfg.CurrentContext = name
	}
	return nil
}

// absPath expands a leading ~/ and makes path absolute, so that the config
// file means the same from any folder.
func absPath(path string) (string, error) {
	if rest, ok := strings.CutPrefix(path, "~/"); ok {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		path = filepath.Join(home, rest)
	}
	return filepath.Abs(path)
}

func newCmdConfigUse(flags *ConfigFlags, streams IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "use NAME",
		Short: "Make a context the current one",
		Args:  exactArgs(1, "a context name"),
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			_, cfg, err := flags.loadConfig(nil)
			if err != nil {
				return nil, cobra.ShellCompDirectiveError
			}
			return cfg.ContextNames(), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(_ *cobra.Command, args []string) error {
			path, cfg, err := flags.loadConfig(nil)
			if err != nil {
				return err
			}
			c := cfg.Context(args[0])
			if c == nil {
				return fmt.Errorf("no context %q in %s (have: %v): create it with `kobe config set %s --endpoint URL`",
					args[0], path, cfg.ContextNames(), args[0])
			}
			cfg.CurrentContext = c.Name
			if err := SaveConfig(path, cfg); err != nil {
				return err
			}
			_, err = fmt.Fprintf(streams.Out, "Switched to context %s (%s)\n", c.Name, c.Endpoint)
			return err
		},
	}
}

// redacted replaces secrets in config view.
const redacted = "REDACTED"

// overridingEnv are the variables that take precedence over the file.
var overridingEnv = []string{"KOBE_CONTEXT", "KOBE_ENDPOINT", "KOBE_TOKEN", "KOBE_OIDC_TOKEN", "KOBE_TOKEN_FILE"}

func newCmdConfigView(flags *ConfigFlags, streams IOStreams) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "view",
		Short: "Print the config file with its tokens masked",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(*cobra.Command, []string) error {
			if err := validateOutput(output); err != nil {
				return err
			}
			path, cfg, err := flags.loadConfig(streams.ErrOut)
			if err != nil {
				return err
			}
			masked := maskConfig(cfg)
			for _, env := range overridingEnv {
				if flags.getenv(env) != "" {
					warnf(streams.ErrOut, "note: %s is set and overrides the file\n", env)
				}
			}
			if output == OutputJSON {
				return printJSON(streams.Out, masked)
			}
			if len(cfg.Contexts) == 0 {
				_, err = fmt.Fprintf(streams.Out, "# %s has no contexts: create one with `kobe config set NAME --endpoint URL`\n", path)
				return err
			}
			data, err := yaml.Marshal(masked)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(streams.Out, "# %s\n%s", path, data)
			return err
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

// maskConfig returns a copy of cfg without secrets.
func maskConfig(cfg *Config) *Config {
	out := &Config{CurrentContext: cfg.CurrentContext, Contexts: make([]Context, len(cfg.Contexts))}
	for i, c := range cfg.Contexts {
		if c.Token != "" {
			c.Token = redacted
		}
		out.Contexts[i] = c
	}
	return out
}

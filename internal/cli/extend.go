package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/kunobi-ninja/kobe/internal/wire"
)

// ExtendOptions are the options of `kobe extend`.
type ExtendOptions struct {
	ID             string
	TTL            string
	KubeconfigPath string
	Output         string

	flags   *ConfigFlags
	streams IOStreams
	now     func() time.Time
}

// NewCmdExtend returns `kobe extend ID`.
func NewCmdExtend(flags *ConfigFlags, streams IOStreams) *cobra.Command {
	o := &ExtendOptions{flags: flags, streams: streams, TTL: "30m", now: time.Now}
	cmd := &cobra.Command{
		Use:   "extend ID|ALIAS",
		Short: "Push a lease's expiry back",
		Long: `Extend one of your Bound leases by --ttl. Extensions are capped by your
AccessPolicy (two by default); past the cap the server refuses with
"extension limit reached": lease a new cluster instead.

When the server re-mints the kubeconfig for the new expiry, kobe rewrites
--kubeconfig, or the file at the default path of 'kobe lease' if it exists.`,
		Example: `  kobe extend lease-a1b2c3d4e5f6 --ttl 1h`,
		Args:    exactArgs(1, "a lease ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ID = args[0]
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&o.TTL, "ttl", o.TTL, "how much longer the lease lasts, e.g. 30m")
	cmd.Flags().StringVar(&o.KubeconfigPath, "kubeconfig", "", "where to write a re-minted kubeconfig (default: the lease's default path, if that file exists)")
	addOutputFlag(cmd, &o.Output)
	return cmd
}

// Validate checks the options without calling the API.
func (o *ExtendOptions) Validate() error {
	if err := validateLeaseRef(o.ID); err != nil {
		return err
	}
	if err := validateTTL("--ttl", o.TTL, false); err != nil {
		return err
	}
	return validateOutput(o.Output)
}

// extendOutput is what -o json prints.
type extendOutput struct {
	ID string `json:"id"`
	wire.ExtendLeaseResponse
	KubeconfigPath string `json:"kubeconfig_path,omitempty"`
}

// Run extends the lease.
func (o *ExtendOptions) Run(ctx context.Context) error {
	c, _, err := o.flags.NewClient(o.streams.ErrOut, true)
	if err != nil {
		return err
	}
	r, err := c.ExtendLease(ctx, o.ID, o.TTL)
	if err != nil {
		return fmt.Errorf("extending lease %s: %w", o.ID, err)
	}
	path, err := o.updateKubeconfig(r.Kubeconfig)
	if err != nil {
		return err
	}
	if o.Output == OutputJSON {
		out := extendOutput{ID: o.ID, ExtendLeaseResponse: *r, KubeconfigPath: path}
		out.Kubeconfig = ""
		return printJSON(o.streams.Out, out)
	}
	p := &printer{w: o.streams.Out}
	p.printf("Lease %s now expires at %s; %d of %d extensions used.\n",
		o.ID, expiry(r.ExpiresAt, o.now()), r.Extensions, r.MaxExtensions)
	if path != "" {
		p.printf("Kubeconfig updated at %s\n", path)
	}
	return p.err
}

// updateKubeconfig writes a re-minted kubeconfig, if the server sent one.
func (o *ExtendOptions) updateKubeconfig(kubeconfig string) (string, error) {
	if kubeconfig == "" {
		return "", nil
	}
	path := o.KubeconfigPath
	if path == "" {
		p, err := defaultKubeconfigPath(o.flags.getenv, o.ID)
		if err != nil {
			return "", nil
		}
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			warnf(o.streams.ErrOut, "The server re-minted the kubeconfig; fetch it with `kobe kubeconfig %s`.\n", o.ID)
			return "", nil
		}
		path = p
	}
	if err := writeKubeconfig(path, kubeconfig); err != nil {
		return "", fmt.Errorf("lease %s was extended but %w", o.ID, err)
	}
	return path, nil
}

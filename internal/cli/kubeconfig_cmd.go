package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/kunobi-ninja/kobe/internal/wire"
)

// KubeconfigOptions are the options of `kobe kubeconfig`.
type KubeconfigOptions struct {
	ID             string
	KubeconfigPath string
	Output         string

	flags   *ConfigFlags
	streams IOStreams
	now     func() time.Time
}

// NewCmdKubeconfig returns `kobe kubeconfig ID`.
func NewCmdKubeconfig(flags *ConfigFlags, streams IOStreams) *cobra.Command {
	o := &KubeconfigOptions{flags: flags, streams: streams, now: time.Now}
	cmd := &cobra.Command{
		Use:   "kubeconfig ID|ALIAS",
		Short: "Write the kubeconfig of a bound lease again",
		Long: `Fetch the kubeconfig of one of your Bound leases and write it (mode 0600),
e.g. after 'kobe lease --no-wait' or when the file was lost. The default
path is the same as for 'kobe lease':
` + kubeconfigHelp,
		Args: exactArgs(1, "a lease ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ID = args[0]
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&o.KubeconfigPath, "kubeconfig", "", "where to write the kubeconfig (default: see above)")
	addOutputFlag(cmd, &o.Output)
	return cmd
}

// Validate checks the options without calling the API.
func (o *KubeconfigOptions) Validate() error {
	if err := validateLeaseRef(o.ID); err != nil {
		return err
	}
	return validateOutput(o.Output)
}

// Run fetches the lease and writes its kubeconfig.
func (o *KubeconfigOptions) Run(ctx context.Context) error {
	c, _, err := o.flags.NewClient(o.streams.ErrOut, true)
	if err != nil {
		return err
	}
	l, err := c.GetLease(ctx, o.ID)
	if err != nil {
		return err
	}
	if l.Phase != wire.PhaseBound || l.Kubeconfig == "" {
		if l.Phase == wire.PhasePending {
			return fmt.Errorf("lease %s is still Pending (number %d in the queue): try again once it is Bound", l.ID, l.QueuePosition)
		}
		return fmt.Errorf("%s and has no kubeconfig", leaseEndedWhy(l))
	}
	path := o.KubeconfigPath
	if path == "" {
		if path, err = defaultKubeconfigPath(o.flags.getenv, l.ID); err != nil {
			return err
		}
	}
	if err := writeKubeconfig(path, l.Kubeconfig); err != nil {
		return err
	}
	if o.Output == OutputJSON {
		return printJSON(o.streams.Out, toLeaseOutput(l, path))
	}
	return printBound(o.streams.Out, l, path, o.now())
}

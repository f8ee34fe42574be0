package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/spf13/cobra"

	"github.com/kunobi-ninja/kobe/internal/wire"
)

// ReleaseOptions are the options of `kobe release`.
type ReleaseOptions struct {
	IDs    []string
	Output string

	flags   *ConfigFlags
	streams IOStreams
}

// NewCmdRelease returns `kobe release ID...`.
func NewCmdRelease(flags *ConfigFlags, streams IOStreams) *cobra.Command {
	o := &ReleaseOptions{flags: flags, streams: streams}
	cmd := &cobra.Command{
		Use:   "release ID|ALIAS...",
		Short: "Release leases: their clusters are destroyed and replaced",
		Long: `Release one or more of your leases, by ID or alias. The operator destroys
their clusters and builds fresh ones for the pool; releasing twice is
harmless, and the server answers the same for a lease you do not hold. The
kubeconfig that 'kobe lease' wrote at its default path is removed.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("%s expects at least one lease ID: `kobe leases` lists yours", cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.IDs = args
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	addOutputFlag(cmd, &o.Output)
	return cmd
}

// Validate checks the options without calling the API.
func (o *ReleaseOptions) Validate() error {
	for _, id := range o.IDs {
		if err := validateLeaseRef(id); err != nil {
			return err
		}
	}
	return validateOutput(o.Output)
}

// Run releases the leases one by one and reports every failure.
func (o *ReleaseOptions) Run(ctx context.Context) error {
	c, _, err := o.flags.NewClient(o.streams.ErrOut, true)
	if err != nil {
		return err
	}
	released := []string{}
	var errs []error
	for _, id := range o.IDs {
		// An alias names the kubeconfig file only through the lease's ID;
		// learn it first (a lease already gone has no file to remove).
		leaseID := id
		if !wire.IsLeaseID(id) {
			if l, err := c.GetLease(ctx, id); err == nil {
				leaseID = l.ID
			}
		}
		if err := c.ReleaseLease(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("releasing lease %s: %w", id, err))
			continue
		}
		released = append(released, id)
		if path, err := defaultKubeconfigPath(o.flags.getenv, leaseID); err == nil {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				warnf(o.streams.ErrOut, "warning: could not remove %s: %v\n", path, err)
			}
		}
		if o.Output != OutputJSON {
			if _, err := fmt.Fprintf(o.streams.Out, "Released lease %s\n", id); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if o.Output == OutputJSON {
		if err := printJSON(o.streams.Out, map[string][]string{"released": released}); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}

// PurgeOptions are the options of `kobe purge`.
type PurgeOptions struct {
	Pool   string
	Output string

	flags   *ConfigFlags
	streams IOStreams
}

// NewCmdPurge returns `kobe purge`.
func NewCmdPurge(flags *ConfigFlags, streams IOStreams) *cobra.Command {
	o := &PurgeOptions{flags: flags, streams: streams}
	cmd := &cobra.Command{
		Use:   "purge",
		Short: "Release every lease you hold",
		Long: `Release every active lease you hold (Bound and Pending), or only those of
--pool: their clusters are destroyed and replaced, as with 'kobe release'.
Useful at the end of a CI job or after a script that leaked leases. Leases
of other callers are never touched.`,
		Example: `  kobe purge
  kobe purge --pool ci-small -o json`,
		Args: exactArgs(0, "no arguments (--pool narrows it to one pool)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&o.Pool, "pool", "", "release only the leases of this pool")
	addOutputFlag(cmd, &o.Output)
	return cmd
}

// Validate checks the options without calling the API.
func (o *PurgeOptions) Validate() error {
	if o.Pool != "" {
		if err := validatePoolName(o.Pool); err != nil {
			return fmt.Errorf("--pool: %w", err)
		}
	}
	return validateOutput(o.Output)
}

// Run lists the caller's active leases and releases them as `kobe release`
// does. Nothing to release is not an error.
func (o *PurgeOptions) Run(ctx context.Context) error {
	c, _, err := o.flags.NewClient(o.streams.ErrOut, true)
	if err != nil {
		return err
	}
	leases, err := c.ListLeasesOf(ctx, wire.LeaseFilter{Pool: o.Pool})
	if err != nil {
		return fmt.Errorf("listing your leases: %w", err)
	}
	ids := make([]string, 0, len(leases))
	for _, l := range leases {
		ids = append(ids, l.ID)
	}
	if len(ids) == 0 && o.Output != OutputJSON {
		_, err := fmt.Fprintln(o.streams.Out, "No active leases to release.")
		return err
	}
	r := &ReleaseOptions{IDs: ids, Output: o.Output, flags: o.flags, streams: o.streams}
	return r.Run(ctx)
}

package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kunobi-ninja/kobe/internal/wire"
)

// LeasesOptions are the options of `kobe leases`.
type LeasesOptions struct {
	Pool   string
	Output string

	flags   *ConfigFlags
	streams IOStreams
	now     func() time.Time
}

// NewCmdLeases returns `kobe leases`.
func NewCmdLeases(flags *ConfigFlags, streams IOStreams) *cobra.Command {
	o := &LeasesOptions{flags: flags, streams: streams, now: time.Now}
	cmd := &cobra.Command{
		Use:   "leases",
		Short: "List your active leases, or all leases of one pool",
		Long: `List your active leases. With --pool, list every lease of that pool; the
requester is shown only on your own.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&o.Pool, "pool", "", "list the leases of this pool instead of your own")
	addOutputFlag(cmd, &o.Output)
	return cmd
}

// Validate checks the options without calling the API.
func (o *LeasesOptions) Validate() error {
	if o.Pool != "" {
		if err := validatePoolName(o.Pool); err != nil {
			return err
		}
	}
	return validateOutput(o.Output)
}

// Run lists the leases.
func (o *LeasesOptions) Run(ctx context.Context) error {
	c, _, err := o.flags.NewClient(o.streams.ErrOut, true)
	if err != nil {
		return err
	}
	var leases []wire.Lease
	if o.Pool != "" {
		leases, err = c.ListPoolLeases(ctx, o.Pool)
	} else {
		leases, err = c.ListLeases(ctx)
	}
	if err != nil {
		return err
	}
	if o.Output == OutputJSON {
		out := make([]leaseOutput, 0, len(leases))
		for i := range leases {
			out = append(out, toLeaseOutput(&leases[i], ""))
		}
		return printJSON(o.streams.Out, out)
	}
	if len(leases) == 0 {
		if o.Pool != "" {
			_, err = fmt.Fprintf(o.streams.Out, "No active leases in pool %s.\n", o.Pool)
		} else {
			_, err = fmt.Fprintln(o.streams.Out, "You have no active leases. Lease a cluster with `kobe lease POOL`.")
		}
		return err
	}
	return printLeaseTable(o.streams.Out, leases, o.now(), o.Pool != "")
}

// PoolsOptions are the options of `kobe pools`.
type PoolsOptions struct {
	Name   string
	Output string

	flags   *ConfigFlags
	streams IOStreams
}

// NewCmdPools returns `kobe pools [NAME]`.
func NewCmdPools(flags *ConfigFlags, streams IOStreams) *cobra.Command {
	o := &PoolsOptions{flags: flags, streams: streams}
	cmd := &cobra.Command{
		Use:     "pools [NAME]",
		Aliases: []string{"pool"},
		Short:   "List the pools you may lease from, with their counters",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				o.Name = args[0]
			}
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
func (o *PoolsOptions) Validate() error {
	if o.Name != "" {
		if err := validatePoolName(o.Name); err != nil {
			return err
		}
	}
	return validateOutput(o.Output)
}

// Run lists the pools.
func (o *PoolsOptions) Run(ctx context.Context) error {
	c, _, err := o.flags.NewClient(o.streams.ErrOut, true)
	if err != nil {
		return err
	}
	if o.Name != "" {
		p, err := c.GetPool(ctx, o.Name)
		if err != nil {
			return err
		}
		if o.Output == OutputJSON {
			return printJSON(o.streams.Out, p)
		}
		return printPoolTable(o.streams.Out, []wire.Pool{*p})
	}
	pools, err := c.ListPools(ctx)
	if err != nil {
		return err
	}
	if o.Output == OutputJSON {
		return printJSON(o.streams.Out, pools)
	}
	if len(pools) == 0 {
		_, err = fmt.Fprintln(o.streams.Out, "No pools you may lease from: `kobe whoami` shows what your AccessPolicy allows.")
		return err
	}
	return printPoolTable(o.streams.Out, pools)
}

// StatusOptions are the options of `kobe status`.
type StatusOptions struct {
	Output string

	flags   *ConfigFlags
	streams IOStreams
}

// NewCmdStatus returns `kobe status`.
func NewCmdStatus(flags *ConfigFlags, streams IOStreams) *cobra.Command {
	o := &StatusOptions{flags: flags, streams: streams}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the server's version and auth methods (and pools, when authenticated)",
		Long: `Show the kobe API's version and the authentication methods it accepts.
It needs only an endpoint, no credentials; with credentials it also shows
the pools you may use.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := validateOutput(o.Output); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	addOutputFlag(cmd, &o.Output)
	return cmd
}

// Run prints the status.
func (o *StatusOptions) Run(ctx context.Context) error {
	c, t, err := o.flags.NewClient(o.streams.ErrOut, false)
	if err != nil {
		return err
	}
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	if o.Output == OutputJSON {
		return printJSON(o.streams.Out, st)
	}
	tw := newTable(o.streams.Out)
	row(tw, "Endpoint:", c.Endpoint())
	if t.ContextName != "" {
		row(tw, "Context:", t.ContextName)
	}
	row(tw, "Server version:", dash(st.Version))
	row(tw, "Auth methods:", dash(strings.Join(st.Auth.Methods, ", ")))
	row(tw, "Your credentials:", t.AuthMethod)
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.Pools) > 0 {
		if _, err := fmt.Fprintln(o.streams.Out); err != nil {
			return err
		}
		return printPoolTable(o.streams.Out, st.Pools)
	}
	return nil
}

// WhoAmIOptions are the options of `kobe whoami`.
type WhoAmIOptions struct {
	Output string

	flags   *ConfigFlags
	streams IOStreams
}

// NewCmdWhoAmI returns `kobe whoami`.
func NewCmdWhoAmI(flags *ConfigFlags, streams IOStreams) *cobra.Command {
	o := &WhoAmIOptions{flags: flags, streams: streams}
	cmd := &cobra.Command{
		Use:   "whoami",
		Short: "Check your credentials: who the server thinks you are and what you may do",
		Long: `Ask the server who you are (GET /v1/whoami) with the configured credentials,
and print your identity, AccessPolicy, the pools you may use and your limits.
Nothing is stored: configure credentials with 'kobe config set' or 'kobe login'.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := validateOutput(o.Output); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	addOutputFlag(cmd, &o.Output)
	return cmd
}

// Run calls whoami and prints the answer.
func (o *WhoAmIOptions) Run(ctx context.Context) error {
	c, _, err := o.flags.NewClient(o.streams.ErrOut, true)
	if err != nil {
		return err
	}
	who, err := c.WhoAmI(ctx)
	if err != nil {
		return err
	}
	if o.Output == OutputJSON {
		return printJSON(o.streams.Out, who)
	}
	if _, err := fmt.Fprintf(o.streams.Out, "Logged in to %s as %s\n", c.Endpoint(), who.Identity); err != nil {
		return err
	}
	tw := newTable(o.streams.Out)
	row(tw, "Policy:", fmt.Sprintf("%s (auth %s)", dash(who.Policy), dash(who.Method)))
	row(tw, "Pools:", dash(strings.Join(who.Pools, ", ")))
	row(tw, "Max TTL:", dash(who.MaxTTL))
	row(tw, "Max concurrent leases:", limit(who.MaxConcurrentLeases))
	row(tw, "Max extensions:", limit(who.MaxExtensions))
	return tw.Flush()
}

func limit(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

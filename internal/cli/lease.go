package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// LeaseOptions are the options of `kobe lease`.
type LeaseOptions struct {
	Pool           string
	TTL            string
	Alias          string
	CleanupMode    string
	KubeconfigPath string
	NoWait         bool
	WaitTimeout    time.Duration
	Output         string
	// KeepAlive holds the lease in the foreground, beating, and releases it
	// on exit.
	KeepAlive bool
	// Heartbeat is the requested heartbeat timeout; 0: the pool's (or,
	// with KeepAlive, defaultRunHeartbeat).
	Heartbeat time.Duration

	flags   *ConfigFlags
	streams IOStreams
	client  *apiclient.Client
	now     func() time.Time
}

// NewCmdLease returns `kobe lease POOL`.
func NewCmdLease(flags *ConfigFlags, streams IOStreams) *cobra.Command {
	o := &LeaseOptions{flags: flags, streams: streams, WaitTimeout: 10 * time.Minute, now: time.Now}
	cmd := &cobra.Command{
		Use:   "lease [POOL]",
		Short: "Lease a cluster from a pool and write its kubeconfig",
		Long: `Lease a cluster from POOL, wait until it is bound, and write its kubeconfig.
Without POOL, the one pool open to you is used; when several are, kobe
names them and asks you to choose.

When the pool has no Ready member the lease waits in the pool's queue; kobe
prints its queue position on stderr while waiting. If it is not bound within
--wait-timeout, or you press Ctrl-C, the lease is released so that nothing
leaks.

The kubeconfig is written with mode 0600 to --kubeconfig, by default to
` + kubeconfigHelp + `

Standard output can be evaluated by a shell: details come as comments and
the last line is 'export KUBECONFIG=...'.

With --keepalive kobe stays in the foreground after printing, sends the
lease's heartbeats and releases the lease when it exits (Ctrl-C, SIGTERM):
if kobe is killed hard or its machine is lost, the lease ends within
--heartbeat-timeout (5m with --keepalive) instead of at its TTL.
--heartbeat-timeout without --keepalive asks for a lease whose holder
sends the heartbeats itself (` + "`kobe heartbeat ID`" + ` or POST
/v1/leases/ID/heartbeat).`,
		Example: `  kobe lease ci-small --ttl 30m
  eval "$(kobe lease ci-small)" && kubectl get nodes
  kobe lease ci-small --no-wait -o json
  kobe lease ci-small --alias build-42 && kobe release build-42
  kobe lease ci-small --keepalive --kubeconfig ./kc   # Ctrl-C releases`,
		Args: maxArgs(1, "at most one pool name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&o.TTL, "ttl", "", "how long the lease lasts once bound, e.g. 30m (default: the pool's ttl; your policy may clamp it)")
	cmd.Flags().StringVar(&o.Alias, "alias", "", "your own name for the lease, usable instead of its id in other commands; unique among your active leases")
	cmd.Flags().StringVar(&o.CleanupMode, "cleanup-mode", "", "Standard (the default) or VerifiedDestroy: the member's teardown is proven, a receipt kept, and a member whose cleanup cannot be proven is Quarantined; refused when the pool's backend cannot prove it")
	cmd.Flags().StringVar(&o.KubeconfigPath, "kubeconfig", "", "where to write the kubeconfig (default: see above)")
	cmd.Flags().BoolVar(&o.NoWait, "no-wait", false, "return at once when the lease is queued (fetch the kubeconfig later with `kobe kubeconfig ID`)")
	cmd.Flags().DurationVar(&o.WaitTimeout, "wait-timeout", o.WaitTimeout, "how long to wait for a queued lease to be bound before releasing it")
	cmd.Flags().BoolVar(&o.KeepAlive, "keepalive", false, "stay in the foreground sending the lease's heartbeats; release the lease on exit")
	cmd.Flags().DurationVar(&o.Heartbeat, "heartbeat-timeout", 0, "end the lease this long after its last heartbeat, 10s to 24h (default: the pool's; 5m with --keepalive)")
	addOutputFlag(cmd, &o.Output)
	return cmd
}

// Complete fills the options from the arguments.
func (o *LeaseOptions) Complete(args []string) error {
	if len(args) > 0 {
		o.Pool = args[0]
	}
	return nil
}

// Validate checks the options without calling the API.
func (o *LeaseOptions) Validate() error {
	if o.Pool != "" {
		if err := validatePoolName(o.Pool); err != nil {
			return err
		}
	}
	if err := validateTTL("--ttl", o.TTL, true); err != nil {
		return err
	}
	if o.Alias != "" {
		if err := wire.ValidateAlias(o.Alias); err != nil {
			return fmt.Errorf("--alias: %w", err)
		}
	}
	switch o.CleanupMode {
	case "", wire.CleanupStandard, wire.CleanupVerifiedDestroy:
	default:
		return fmt.Errorf("--cleanup-mode must be %s or %s (got %q)", wire.CleanupStandard, wire.CleanupVerifiedDestroy, o.CleanupMode)
	}
	if o.WaitTimeout <= 0 {
		return fmt.Errorf("--wait-timeout must be positive, e.g. 10m (got %s)", o.WaitTimeout)
	}
	if o.KeepAlive && o.NoWait {
		return errors.New("--keepalive and --no-wait cannot be combined: --keepalive holds a bound lease in the foreground")
	}
	if o.Heartbeat < 0 {
		return fmt.Errorf("--heartbeat-timeout %s: must be between %s and %s", o.Heartbeat, wire.MinHeartbeatTimeout, wire.MaxHeartbeatTimeout)
	}
	if err := validateHeartbeat("--heartbeat-timeout", o.Heartbeat); err != nil {
		return err
	}
	return validateOutput(o.Output)
}

// validateTTL checks a TTL flag: a positive Go duration such as 30m or 1h30m.
func validateTTL(flag, ttl string, emptyOK bool) error {
	if ttl == "" {
		if emptyOK {
			return nil
		}
		return fmt.Errorf("%s is empty: give a duration such as 30m", flag)
	}
	d, err := time.ParseDuration(ttl)
	if err != nil || d <= 0 {
		return fmt.Errorf("%s %q is not a positive duration: use a value such as 30m, 2h or 1h30m", flag, ttl)
	}
	return nil
}

// Run leases, waits and writes the kubeconfig.
func (o *LeaseOptions) Run(ctx context.Context) error {
	c, _, err := o.flags.NewClient(o.streams.ErrOut, true)
	if err != nil {
		return err
	}
	o.client = c
	if o.Pool == "" {
		if o.Pool, err = onlyPool(ctx, c); err != nil {
			return err
		}
	}
	heartbeat := o.Heartbeat
	if o.KeepAlive && heartbeat == 0 {
		heartbeat = defaultRunHeartbeat
	}
	req := wire.CreateLeaseRequest{Pool: o.Pool, TTL: o.TTL, Alias: o.Alias, CleanupMode: o.CleanupMode, HeartbeatTimeout: formatHeartbeat(heartbeat)}
	l, err := acquire(ctx, c, req, o.NoWait, o.WaitTimeout, o.streams.ErrOut)
	if err != nil {
		return err
	}
	if l.Phase != wire.PhaseBound {
		if o.Output == OutputJSON {
			return printJSON(o.streams.Out, toLeaseOutput(l, ""))
		}
		p := &printer{w: o.streams.Out}
		p.printf("# Lease %s is %s: number %d in pool %s's queue.\n", l.ID, l.Phase, l.QueuePosition, l.Pool)
		p.printf("# Fetch its kubeconfig once it is Bound with: kobe kubeconfig %s\n", l.ID)
		p.printf("# Release it with: kobe release %s\n", l.ID)
		p.printf("export KOBE_LEASE_ID=%s\n", shellQuote(l.ID))
		return p.err
	}

	path, err := o.writeKubeconfig(ctx, l)
	if err != nil {
		return err
	}
	if o.Output == OutputJSON {
		err = printJSON(o.streams.Out, toLeaseOutput(l, path))
	} else {
		err = printBound(o.streams.Out, l, path, o.now())
	}
	if err != nil || !o.KeepAlive {
		return err
	}
	return o.holdInForeground(ctx, l, path)
}

// holdInForeground is --keepalive: it sends the lease's heartbeats until
// kobe is told to stop, then releases the lease and removes the kubeconfig
// it wrote at the default path. A lease that ends meanwhile (its TTL,
// released elsewhere) ends it with an error that says so.
func (o *LeaseOptions) holdInForeground(ctx context.Context, l *wire.Lease, path string) error {
	timeout := leaseHeartbeat(l)
	var err error
	if timeout > 0 {
		warnf(o.streams.ErrOut, "Keeping lease %s alive (heartbeat timeout %s); Ctrl-C releases it.\n", l.ID, humanDuration(timeout))
		err = keepAlive(ctx, o.client, l.ID, heartbeatInterval(timeout), o.streams.ErrOut)
	} else {
		// A server that ignored the heartbeat timeout: nothing to send,
		// the lease ends at its TTL if kobe is killed; release on exit all
		// the same.
		warnf(o.streams.ErrOut, "warning: the server gave lease %s no heartbeat timeout; if kobe is killed it ends at its TTL. Ctrl-C releases it.\n", l.ID)
		<-ctx.Done()
	}
	if err != nil {
		return fmt.Errorf("lease %s: %w", l.ID, err)
	}
	if rerr := releaseDetached(ctx, o.client, l.ID); rerr != nil {
		return fmt.Errorf("%w: it ends %s after the last heartbeat, or run `kobe release %s`", rerr, humanDuration(timeout), l.ID)
	}
	if o.KubeconfigPath == "" {
		if rmErr := os.Remove(path); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) {
			warnf(o.streams.ErrOut, "warning: could not remove %s: %v\n", path, rmErr)
		}
	}
	warnf(o.streams.ErrOut, "Released lease %s\n", l.ID)
	return nil
}

// writeKubeconfig writes a bound lease's kubeconfig; a lease whose
// kubeconfig cannot be written is of no use, so it is released.
func (o *LeaseOptions) writeKubeconfig(ctx context.Context, l *wire.Lease) (string, error) {
	path := o.KubeconfigPath
	err := error(nil)
	if l.Kubeconfig == "" {
		err = errors.New("the server sent no kubeconfig")
	} else if path == "" {
		path, err = defaultKubeconfigPath(o.flags.getenv, l.ID)
	}
	if err == nil {
		err = writeKubeconfig(path, l.Kubeconfig)
	}
	if err == nil {
		return path, nil
	}
	if rerr := releaseDetached(ctx, o.client, l.ID); rerr != nil {
		return "", fmt.Errorf("lease %s is bound but %w; and %w", l.ID, err, rerr)
	}
	return "", fmt.Errorf("lease %s was bound but %w; released it", l.ID, err)
}

// printBound prints a bound lease as shell comments followed by the export
// line, so that `eval "$(kobe lease POOL)"` works.
func printBound(w io.Writer, l *wire.Lease, path string, now time.Time) error {
	p := &printer{w: w}
	p.printf("# Lease %s is Bound to cluster %s of pool %s.\n", l.ID, dash(l.ClusterName), l.Pool)
	p.printf("# Expires at %s; effective TTL %s, %d of %d extensions used.\n",
		expiry(l.ExpiresAt, now), dash(l.EffectiveTTL), l.Extensions, l.MaxExtensions)
	if l.HeartbeatTimeout != "" {
		p.printf("# Ends %s after its last heartbeat (next: by %s; kobe heartbeat %s).\n", l.HeartbeatTimeout, expiry(l.HeartbeatEndsAt, now), l.ID)
	}
	if l.IdleTimeout != "" {
		p.printf("# Ends when unused for %s (no request through kobe's connect proxy; next: by %s).\n", l.IdleTimeout, expiry(l.IdleEndsAt, now))
	}
	p.printf("# Kubeconfig written to %s\n", path)
	p.printf("# Extend with `kobe extend %s`, release with `kobe release %s`.\n", l.ID, l.ID)
	p.printf("export KUBECONFIG=%s\n", shellQuote(path))
	return p.err
}

// onlyPool is the pool a `kobe lease` without POOL means: the one pool the
// caller may use. None or several is an error that says what to do.
func onlyPool(ctx context.Context, c *apiclient.Client) (string, error) {
	pools, err := c.ListPools(ctx)
	if err != nil {
		return "", fmt.Errorf("finding the pool to lease from: %w", err)
	}
	switch len(pools) {
	case 0:
		return "", errors.New("no pool is open to you: ask for access (an AccessPolicy rule naming a pool), then run 'kobe lease POOL'")
	case 1:
		return pools[0].Name, nil
	}
	names := make([]string, 0, len(pools))
	for _, p := range pools {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	return "", fmt.Errorf("%d pools are open to you (%s): name one, e.g. 'kobe lease %s'", len(names), strings.Join(names, ", "), names[0])
}

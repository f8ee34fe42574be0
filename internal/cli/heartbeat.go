package cli

import (
	"context"
	"time"

	"github.com/spf13/cobra"
)

// HeartbeatOptions are the options of `kobe heartbeat`.
type HeartbeatOptions struct {
	ID     string
	Output string

	flags   *ConfigFlags
	streams IOStreams
	now     func() time.Time
}

// NewCmdHeartbeat returns `kobe heartbeat ID`: one heartbeat, for scripts
// that hold a lease with a heartbeat timeout themselves.
func NewCmdHeartbeat(flags *ConfigFlags, streams IOStreams) *cobra.Command {
	o := &HeartbeatOptions{flags: flags, streams: streams, now: time.Now}
	cmd := &cobra.Command{
		Use:   "heartbeat ID|ALIAS",
		Short: "Tell the server that a lease's holder is alive",
		Long: `Send one heartbeat for a lease created with a heartbeat timeout
('kobe lease --heartbeat-timeout', or a pool or policy that sets one). A
lease that gets none for its timeout ends (HeartbeatMissed) and its cluster
is destroyed. Send one every few minutes from a loop or a CI step of your
own; 'kobe run' and 'kobe lease --keepalive' send them for you.`,
		Example: `  kobe heartbeat build-42
  while sleep 60; do kobe heartbeat "$KOBE_LEASE_ID" -q || break; done`,
		Args: exactArgs(1, "a lease ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ID = args[0]
			if err := validateLeaseRef(o.ID); err != nil {
				return err
			}
			if err := validateOutput(o.Output); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	addOutputFlag(cmd, &o.Output)
	return cmd
}

// Run sends the heartbeat and prints when the lease ends without another.
func (o *HeartbeatOptions) Run(ctx context.Context) error {
	c, _, err := o.flags.NewClient(o.streams.ErrOut, true)
	if err != nil {
		return err
	}
	l, err := c.Heartbeat(ctx, o.ID)
	if err != nil {
		return err
	}
	if o.Output == OutputJSON {
		return printJSON(o.streams.Out, toLeaseOutput(l, ""))
	}
	p := &printer{w: o.streams.Out}
	p.printf("Lease %s is alive until %s without another heartbeat.\n", l.ID, expiry(l.HeartbeatEndsAt, o.now()))
	return p.err
}

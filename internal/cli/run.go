package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// Exit codes of `kobe run` besides the command's own (see its --help).
const (
	ExitWaitTimeout   = 124
	ExitKobeFailed    = 125
	ExitCannotExecute = 126
	ExitNotFound      = 127
)

// RunOptions are the options of `kobe run`.
type RunOptions struct {
	Pool        string
	Command     []string
	TTL         string
	WaitTimeout time.Duration
	Quiet       bool
	// Heartbeat is the lease's heartbeat timeout; 0: none.
	Heartbeat time.Duration

	flags   *ConfigFlags
	streams IOStreams
	now     func() time.Time
}

// NewCmdRun returns `kobe run POOL -- CMD [ARGS...]`.
func NewCmdRun(flags *ConfigFlags, streams IOStreams) *cobra.Command {
	o := &RunOptions{flags: flags, streams: streams, WaitTimeout: 10 * time.Minute, Heartbeat: defaultRunHeartbeat, now: time.Now}
	cmd := &cobra.Command{
		Use:   "run POOL [flags] -- CMD [ARGS...]",
		Short: "Lease a cluster, run a command against it, and release it",
		Long: `Lease a cluster from POOL, wait until it is bound, and run CMD with
KUBECONFIG pointing at the lease's kubeconfig (a temporary file, mode 0600)
and KOBE_LEASE_ID set. CMD's standard input, output and error are kobe's.

The lease is released and the kubeconfig removed on every exit path: when
CMD succeeds or fails, and when kobe receives SIGINT (Ctrl-C), SIGTERM,
SIGHUP or SIGQUIT, which it forwards to CMD before waiting for CMD to exit.
While CMD runs, kobe sends the lease's heartbeats: if kobe itself is killed
(SIGKILL, an OOM kill, a lost machine), the lease ends within
--heartbeat-timeout (5m) instead of at its TTL, and its cluster is freed.

Exit status:
  CMD's exit status   when CMD ran
  128+N               CMD was killed by signal N (130 for SIGINT, 143 for SIGTERM),
                      or kobe got signal N while waiting for the lease (released)
  124                 the lease was not bound within --wait-timeout (released)
  125                 kobe failed before running CMD (usage, configuration, API error)
  126                 CMD could not be executed
  127                 CMD was not found`,
		Example: `  kobe run ci-small --ttl 30m -- make e2e
  kobe run ci-small -- sh -c 'kubectl apply -f deploy/ && go test ./test/e2e/...'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 || len(args) < 2 {
				return &ExitError{Code: ExitKobeFailed, Err: fmt.Errorf("usage: %s POOL [flags] -- CMD [ARGS...]: put `--` between the pool and the command", cmd.CommandPath())}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return &ExitError{Code: ExitKobeFailed, Err: err}
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &ExitError{Code: ExitKobeFailed, Err: fmt.Errorf("%w\nRun '%s --help' for usage", err, c.CommandPath())}
	})
	cmd.Flags().StringVar(&o.TTL, "ttl", "", "how long the lease lasts once bound, e.g. 30m (default: the pool's ttl)")
	cmd.Flags().DurationVar(&o.WaitTimeout, "wait-timeout", o.WaitTimeout, "how long to wait for a queued lease to be bound")
	cmd.Flags().BoolVarP(&o.Quiet, "quiet", "q", false, "print only errors, not kobe's progress lines")
	cmd.Flags().DurationVar(&o.Heartbeat, "heartbeat-timeout", o.Heartbeat, "end the lease this long after kobe stopped sending heartbeats (10s to 24h; 0: no heartbeats, the lease lasts its TTL)")
	return cmd
}

// Complete splits the arguments into the pool and the command.
func (o *RunOptions) Complete(args []string) error {
	if len(args) > 0 {
		o.Pool, o.Command = args[0], args[1:]
	}
	return nil
}

// Validate checks the options without calling the API.
func (o *RunOptions) Validate() error {
	if err := validatePoolName(o.Pool); err != nil {
		return err
	}
	if len(o.Command) == 0 || o.Command[0] == "" {
		return errors.New("no command to run: give it after `--`")
	}
	if err := validateTTL("--ttl", o.TTL, true); err != nil {
		return err
	}
	if o.WaitTimeout <= 0 {
		return fmt.Errorf("--wait-timeout must be positive, e.g. 10m (got %s)", o.WaitTimeout)
	}
	return validateHeartbeat("--heartbeat-timeout", o.Heartbeat)
}

func (o *RunOptions) logf(format string, args ...any) {
	if !o.Quiet {
		warnf(o.streams.ErrOut, "kobe: "+format+"\n", args...)
	}
}

// Run leases, runs the command and releases. Its error is always an
// *ExitError carrying the exit status described in --help.
func (o *RunOptions) Run(ctx context.Context) error {
	c, _, err := o.flags.NewClient(o.streams.ErrOut, true)
	if err != nil {
		return &ExitError{Code: ExitKobeFailed, Err: err}
	}
	// Find the command before leasing: a typo should not cost a cluster.
	path, err := exec.LookPath(o.Command[0])
	if err != nil {
		code := ExitNotFound
		if errors.Is(err, fs.ErrPermission) {
			code = ExitCannotExecute
		}
		return &ExitError{Code: code, Err: err}
	}

	progress := o.streams.ErrOut
	if o.Quiet {
		progress = io.Discard
	}
	l, err := acquire(ctx, c, wire.CreateLeaseRequest{Pool: o.Pool, TTL: o.TTL, HeartbeatTimeout: formatHeartbeat(o.Heartbeat)}, false, o.WaitTimeout, progress)
	if err != nil {
		var sig *SignalError
		switch {
		case errors.As(context.Cause(ctx), &sig) && ctx.Err() != nil:
			return &ExitError{Code: sig.exitCode(), Err: err}
		case errors.Is(err, errWaitTimeout):
			return &ExitError{Code: ExitWaitTimeout, Err: err}
		}
		return &ExitError{Code: ExitKobeFailed, Err: err}
	}

	code, err := o.runBoundAlive(ctx, c, path, l)
	if err == nil && code != 0 {
		o.warnIfLost(ctx, c, l.ID)
	}
	if rerr := releaseDetached(ctx, c, l.ID); rerr != nil {
		warnf(o.streams.ErrOut, "kobe: warning: %v; it ends at its TTL (%s), or run `kobe release %s`\n",
			rerr, expiry(l.ExpiresAt, o.now()), l.ID)
	} else {
		o.logf("released lease %s", l.ID)
	}
	if err != nil || code != 0 {
		return &ExitError{Code: code, Err: err}
	}
	return nil
}

// runBoundAlive is runBound with the lease's heartbeats sent meanwhile. A
// lease that ends under the command (its TTL, InstanceLost) stops the
// heartbeats, not the command: its kubectl calls will fail and say why.
func (o *RunOptions) runBoundAlive(ctx context.Context, c *apiclient.Client, path string, l *wire.Lease) (int, error) {
	timeout := leaseHeartbeat(l)
	if timeout <= 0 {
		return o.runBound(ctx, path, l)
	}
	beats, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- keepAlive(beats, c, l.ID, heartbeatInterval(timeout), o.streams.ErrOut) }()
	code, err := o.runBound(ctx, path, l)
	stop()
	if kerr := <-done; kerr != nil {
		o.logf("heartbeats of lease %s stopped: %v", l.ID, kerr)
	}
	return code, err
}

// runBound writes the kubeconfig to a temporary file, runs the command and
// removes the file; it returns the exit status for kobe.
func (o *RunOptions) runBound(ctx context.Context, path string, l *wire.Lease) (int, error) {
	if l.Kubeconfig == "" {
		return ExitKobeFailed, fmt.Errorf("lease %s is bound but the server sent no kubeconfig", l.ID)
	}
	data, err := safeKubeconfig([]byte(l.Kubeconfig))
	if err != nil {
		return ExitKobeFailed, fmt.Errorf("lease %s is bound but %w; the command was not run", l.ID, err)
	}
	f, err := os.CreateTemp("", "kobe-"+l.ID+"-*.kubeconfig")
	if err != nil {
		return ExitKobeFailed, fmt.Errorf("writing kubeconfig: %w", err)
	}
	kubeconfig := f.Name()
	defer func() { _ = os.Remove(kubeconfig) }()
	_ = f.Chmod(0o600)
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return ExitKobeFailed, fmt.Errorf("writing kubeconfig: %w", err)
	}
	if err := f.Close(); err != nil {
		return ExitKobeFailed, fmt.Errorf("writing kubeconfig: %w", err)
	}

	o.logf("lease %s is Bound to cluster %s of pool %s, expires at %s; running %s",
		l.ID, dash(l.ClusterName), l.Pool, expiry(l.ExpiresAt, o.now()), strings.Join(o.Command, " "))

	cmd := exec.Command(path, o.Command[1:]...)
	cmd.Args[0] = o.Command[0]
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "KOBE_LEASE_ID="+l.ID)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = o.streams.In, o.streams.Out, o.streams.ErrOut
	return runForwardingSignals(ctx, cmd)
}

// runForwardingSignals starts cmd, forwards kobe's termination signals to it
// and waits for it to exit. When ctx ends for another reason than a signal,
// cmd gets SIGTERM. It returns cmd's exit status (128+N when a signal N
// killed it).
func runForwardingSignals(ctx context.Context, cmd *exec.Cmd) (int, error) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, terminationSignals...)
	defer signal.Stop(sigs)

	if err := cmd.Start(); err != nil {
		code := ExitCannotExecute
		if errors.Is(err, fs.ErrNotExist) {
			code = ExitNotFound
		}
		return code, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	// A signal reaches both sigs and (through Main) ctx; forward it once.
	ctxDone := ctx.Done()
	var causeSig os.Signal
	forwardedFromCtx, received := false, 0
	for {
		select {
		case s := <-sigs:
			received++
			if received == 1 && forwardedFromCtx && s == causeSig {
				continue
			}
			_ = cmd.Process.Signal(s)
		case <-ctxDone:
			ctxDone = nil
			if received > 0 {
				continue
			}
			causeSig = syscall.SIGTERM
			var sig *SignalError
			if errors.As(context.Cause(ctx), &sig) {
				causeSig = sig.Signal
			}
			forwardedFromCtx = true
			_ = cmd.Process.Signal(causeSig)
		case err := <-done:
			var exitErr *exec.ExitError
			if err != nil && !errors.As(err, &exitErr) {
				return ExitKobeFailed, fmt.Errorf("waiting for %s: %w", cmd.Args[0], err)
			}
			return exitStatus(cmd.ProcessState), nil
		}
	}
}

// exitStatus is a shell's $? for a finished process.
func exitStatus(state *os.ProcessState) int {
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return state.ExitCode()
}

// warnIfLost tells, after a command failed, whether its cluster died under
// it (the lease ended with reason InstanceLost): the failure may then be the
// cluster's, not the command's.
func (o *RunOptions) warnIfLost(ctx context.Context, c *apiclient.Client, id string) {
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	l, err := c.GetLease(gctx, id)
	if err == nil && l.Reason == reasonInstanceLost {
		warnf(o.streams.ErrOut, "kobe: warning: %s; the command's failure may be the cluster's\n", leaseEndedWhy(l))
	}
}

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kunobi-ninja/kobe/internal/apiclient"
)

// IOStreams are the standard streams of a command.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
}

// StdStreams are the process's standard streams.
func StdStreams() IOStreams {
	return IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
}

// ExitError ends the CLI with Code, printing Err first when it is not nil.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// SignalError is the cause of a context cancelled by a signal.
type SignalError struct {
	Signal os.Signal
}

func (e *SignalError) Error() string { return "interrupted by " + e.Signal.String() }

// exitCode is the shell's code for a process ended by this signal (128+N).
func (e *SignalError) exitCode() int {
	if s, ok := e.Signal.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}

// terminationSignals end the CLI (and are forwarded to `kobe run`'s command).
var terminationSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// Main runs the CLI on the process's arguments and streams, cancelling the
// commands' context on SIGINT, SIGTERM, SIGHUP or SIGQUIT (with a
// *SignalError cause), and returns the exit code.
func Main() int {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, terminationSignals...)
	defer signal.Stop(sigs)
	go func() {
		select {
		case s := <-sigs:
			cancel(&SignalError{Signal: s})
		case <-ctx.Done():
		}
	}()
	return Execute(ctx, os.Args[1:], StdStreams())
}

// Execute runs the CLI with args and returns the exit code: 0 on success,
// the code of an *ExitError, 1 on any other error (printed with a hint).
func Execute(ctx context.Context, args []string, streams IOStreams) int {
	root := NewRootCommand(streams)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	code := 1
	var exitErr *ExitError
	var sigErr *SignalError
	if errors.As(err, &sigErr) {
		code = sigErr.exitCode()
	}
	if errors.As(err, &exitErr) {
		code = exitErr.Code
		err = exitErr.Err
	}
	if err != nil {
		warnf(streams.ErrOut, "error: %v\n", err)
		if h := hint(err); h != "" {
			warnf(streams.ErrOut, "hint: %s\n", h)
		}
	}
	return code
}

// hint says what to do about errors whose message alone does not.
func hint(err error) string {
	var loadErr *loadError
	if errors.As(err, &loadErr) {
		if h := loadErr.hint(); h != "" {
			return h
		}
	}
	var apiErr *apiclient.Error
	if errors.As(err, &apiErr) {
		switch apiErr.StatusCode {
		case http.StatusUnauthorized:
			return "the server did not accept your credentials: check them with `kobe config view`, --token/--token-file or KOBE_TOKEN, then try `kobe whoami`"
		case http.StatusForbidden:
			return "your AccessPolicy does not allow this: `kobe whoami` lists the pools you may use"
		case http.StatusTooManyRequests, http.StatusServiceUnavailable:
			if apiErr.RetryAfter > 0 {
				return fmt.Sprintf("try again in %s", humanDuration(apiErr.RetryAfter))
			}
			return "try again later"
		}
		return ""
	}
	var netErr net.Error
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) || errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &netErr) && netErr.Timeout()) {
		return "is the endpoint right and the kobe API up? `kobe config view` shows the endpoint in use"
	}
	return ""
}

// NewRootCommand builds the kobe command tree.
func NewRootCommand(streams IOStreams) *cobra.Command {
	flags := NewConfigFlags()
	root := &cobra.Command{
		Use:   "kobe",
		Short: "Lease warm Kubernetes clusters from a kobe operator",
		Long: `kobe leases Kubernetes clusters from the warm pools of a kobe operator.

A lease binds you to a cluster that is already running, hands you a
kubeconfig whose certificate expires with the lease, and is ended by the
operator when its TTL runs out, whether or not you release it.

Configure the API once with 'kobe config set NAME --endpoint URL ...', or
per call with --endpoint/--token or KOBE_ENDPOINT/KOBE_TOKEN.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w\nRun '%s --help' for usage", err, c.CommandPath())
	})
	flags.AddFlags(root.PersistentFlags())

	root.AddCommand(
		NewCmdVersion(streams),
		NewCmdLease(flags, streams),
		NewCmdKubeconfig(flags, streams),
		NewCmdRelease(flags, streams),
		NewCmdPurge(flags, streams),
		NewCmdExtend(flags, streams),
		NewCmdHeartbeat(flags, streams),
		NewCmdLoad(flags, streams),
		NewCmdLeases(flags, streams),
		NewCmdPools(flags, streams),
		NewCmdStatus(flags, streams),
		NewCmdLogin(flags, streams),
		NewCmdLogout(flags, streams),
		NewCmdWhoAmI(flags, streams),
		NewCmdRun(flags, streams),
		NewCmdConfig(flags, streams),
		NewCmdAdmin(streams),
	)
	return root
}

// releaseTimeout bounds a release that runs after the command's context
// was cancelled.
const releaseTimeout = 30 * time.Second

// releaseDetached releases a lease on a context that survives ctx's
// cancellation (Ctrl-C, a timeout), so that nothing leaks.
func releaseDetached(ctx context.Context, c *apiclient.Client, id string) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := c.ReleaseLease(rctx, id); err != nil {
		return fmt.Errorf("releasing lease %s: %w", id, err)
	}
	return nil
}

// exactArgs is cobra.ExactArgs with a message that names what is missing.
// maxArgs is cobra.MaximumNArgs with a message that says what is expected.
func maxArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > n {
			return fmt.Errorf("%s expects %s, got %d argument(s)\nRun '%s --help' for usage", cmd.CommandPath(), what, len(args), cmd.CommandPath())
		}
		return nil
	}
}

func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return fmt.Errorf("%s expects %s, got %d argument(s)\nRun '%s --help' for usage", cmd.CommandPath(), what, len(args), cmd.CommandPath())
		}
		return nil
	}
}

package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kunobi-ninja/kobe/internal/wire"
)

// Output formats of -o.
const (
	OutputHuman = ""
	OutputJSON  = "json"
)

// addOutputFlag registers -o/--output on cmd.
func addOutputFlag(cmd *cobra.Command, output *string) {
	cmd.Flags().StringVarP(output, "output", "o", OutputHuman, "output format: json, or empty for human-readable text")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{OutputJSON}, cobra.ShellCompDirectiveNoFileComp))
}

func validateOutput(output string) error {
	switch output {
	case OutputHuman, OutputJSON:
		return nil
	}
	return fmt.Errorf("unknown output format %q: use -o json, or leave -o out for text", output)
}

// printer writes to w and keeps the first error, so that a command prints
// freely and reports a failed write (a closed pipe) once.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

// warnf writes a diagnostic (progress, warning, error) to w; one that cannot
// be written has nowhere else to go, so its error is dropped.
func warnf(w io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintf(w, format, args...)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newTable returns a tabwriter laid out like kubectl's tables.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
}

func row(w io.Writer, cells ...any) {
	parts := make([]string, len(cells))
	for i, c := range cells {
		parts[i] = fmt.Sprint(c)
	}
	// Errors surface from the tabwriter's Flush.
	_, _ = fmt.Fprintln(w, strings.Join(parts, "\t"))
}

// dash shows an empty value as "-".
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// humanDuration renders d for people: "45s", "12m", "1h30m".
func humanDuration(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	switch {
	case d < time.Minute:
		return wire.FormatTTL(d.Round(time.Second))
	case d < 24*time.Hour:
		return wire.FormatTTL(d.Round(time.Minute))
	}
	days := d / (24 * time.Hour)
	return fmt.Sprintf("%dd%s", days, wire.FormatTTL((d - days*24*time.Hour).Round(time.Hour)))
}

// expiry renders an expiry time relative to now: "2026-04-09T15:00:00Z (in 30m)".
func expiry(t *time.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	d := t.Sub(now)
	rel := "in " + humanDuration(d)
	if d < 0 {
		rel = humanDuration(d) + " ago"
	}
	return fmt.Sprintf("%s (%s)", t.UTC().Format(time.RFC3339), rel)
}

// shortExpiry renders an expiry for a table cell: "in 30m", "5m ago", "-".
func shortExpiry(t *time.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	d := t.Sub(now)
	if d < 0 {
		return humanDuration(d) + " ago"
	}
	return "in " + humanDuration(d)
}

// leaseOutput is a lease as the CLI prints it with -o json: never with its
// kubeconfig (output ends up in CI logs), but with where it was written.
type leaseOutput struct {
	wire.Lease
	KubeconfigPath string `json:"kubeconfig_path,omitempty"`
}

func toLeaseOutput(l *wire.Lease, path string) leaseOutput {
	c := *l
	c.Kubeconfig = ""
	return leaseOutput{Lease: c, KubeconfigPath: path}
}

func printLeaseTable(w io.Writer, leases []wire.Lease, now time.Time, withRequester bool) error {
	tw := newTable(w)
	header := []any{"ID", "POOL", "PHASE", "CLUSTER", "QUEUE", "EXPIRES", "EXTENSIONS"}
	if withRequester {
		header = append(header, "REQUESTER")
	}
	row(tw, header...)
	for _, l := range leases {
		queue := "-"
		if l.Phase == wire.PhasePending && l.QueuePosition > 0 {
			queue = fmt.Sprint(l.QueuePosition)
		}
		cells := []any{l.ID, l.Pool, l.Phase, dash(l.ClusterName), queue, shortExpiry(l.ExpiresAt, now),
			fmt.Sprintf("%d/%d", l.Extensions, l.MaxExtensions)}
		if withRequester {
			cells = append(cells, dash(l.Requester))
		}
		row(tw, cells...)
	}
	return tw.Flush()
}

func printPoolTable(w io.Writer, pools []wire.Pool) error {
	tw := newTable(w)
	row(tw, "NAME", "PHASE", "READY", "LEASED", "CREATING", "RECYCLING", "UNHEALTHY", "QUARANTINED", "QUEUE", "MODE", "TTL")
	for _, p := range pools {
		row(tw, p.Name, dash(p.Phase), p.Ready, p.Leased, p.Creating, p.Recycling, p.Unhealthy, p.Quarantined, p.QueueDepth,
			dash(p.Policy.Mode), dash(p.Policy.TTL))
	}
	return tw.Flush()
}

package cli

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"github.com/kunobi-ninja/kobe/internal/auditrecord"
)

type auditOptions struct {
	*AdminOptions
	Name string
}

func newCmdAudit(a *AdminOptions) *cobra.Command {
	o := &auditOptions{AdminOptions: a}
	return &cobra.Command{
		Use:   "audit NAME",
		Short: "Print the audit records of a lease, member, pool or identity (JSON)",
		Long: `Print, as JSON, the audit records of the ended leases that held a member
(docs/audit.md) whose lease (name or UID), member, pool or identity is
NAME, oldest first: who held which member, from when to when, under which
policy, and why the lease ended. Records are kept for --audit-retention
(30 days by default) after their lease ended.`,
		Example: `  kobe admin audit lease-0123456789ab
  kobe admin audit pool-ci-small-3
  kobe admin audit ci-small
  kobe admin audit my-org/my-repo:refs/heads/main`,
		Args: exactArgs(1, "a lease, member, pool or identity"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name = args[0]
			return o.Run(cmd.Context())
		},
	}
}

// Run prints the matching records, ordered by when their lease ended.
func (o *auditOptions) Run(ctx context.Context) error {
	c, ns, err := o.newClient(o.AdminOptions)
	if err != nil {
		return err
	}
	cms, err := auditrecord.List(ctx, c, ns)
	if err != nil {
		return err
	}
	out := []map[string]string{}
	for i := range cms {
		recs, err := auditrecord.Decode(&cms[i])
		if err != nil {
			warnf(o.streams.ErrOut, "skipping %v\n", err)
			continue
		}
		for _, rec := range recs {
			if matchesAudit(rec, o.Name) {
				out = append(out, rec)
			}
		}
	}
	if len(out) == 0 {
		return fmt.Errorf("no audit record names %q in namespace %q: records are written for leases that held a member, once they ended", o.Name, ns)
	}
	// RFC 3339 in UTC sorts as text; the lease UID breaks ties.
	slices.SortFunc(out, func(a, b map[string]string) int {
		return cmp.Or(cmp.Compare(a[auditrecord.KeyEndedAt], b[auditrecord.KeyEndedAt]), cmp.Compare(a[auditrecord.KeyLeaseUID], b[auditrecord.KeyLeaseUID]))
	})
	return printJSON(o.streams.Out, out)
}

// matchesAudit reports whether rec is about name: its lease (name or UID),
// member, pool or identity.
func matchesAudit(rec map[string]string, name string) bool {
	for _, k := range []string{auditrecord.KeyLease, auditrecord.KeyLeaseUID, auditrecord.KeyMember, auditrecord.KeyPool, auditrecord.KeyIdentity} {
		if rec[k] == name {
			return true
		}
	}
	return false
}

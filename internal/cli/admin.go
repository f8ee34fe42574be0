package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/cleanup"
	"github.com/kunobi-ninja/kobe/internal/scheme"
)

// AdminOptions reach the host cluster the operator runs in, with the
// administrator's own kubeconfig: admin commands act on kobe's objects
// there, not through the lease API.
type AdminOptions struct {
	HostKubeconfig string
	Context        string
	Namespace      string

	streams IOStreams
	// newClient is the host cluster's client; tests replace it.
	newClient func(o *AdminOptions) (client.Client, string, error)
}

// NewCmdAdmin returns `kobe admin`.
func NewCmdAdmin(streams IOStreams) *cobra.Command {
	o := &AdminOptions{streams: streams, newClient: hostClient}
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Administer kobe in its host cluster (needs a kubeconfig of the host cluster)",
		Long: `Commands for the administrators of a kobe installation. They act on kobe's
objects in the host cluster with your own kubeconfig (KUBECONFIG, or
--host-kubeconfig), in the operator's namespace (--namespace, default: the
kubeconfig context's namespace).`,
	}
	cmd.PersistentFlags().StringVar(&o.HostKubeconfig, "host-kubeconfig", "", "kubeconfig of the host cluster (default: KUBECONFIG or ~/.kube/config)")
	cmd.PersistentFlags().StringVar(&o.Context, "context", "", "context of the host kubeconfig to use")
	cmd.PersistentFlags().StringVarP(&o.Namespace, "namespace", "n", "", "the operator's namespace (default: the context's namespace)")
	cmd.AddCommand(newCmdRetryCleanup(o), newCmdReceipt(o), newCmdAudit(o))
	return cmd
}

// hostClient builds a client of the host cluster from the usual kubeconfig
// rules and resolves the namespace.
func hostClient(o *AdminOptions) (client.Client, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.HostKubeconfig
	cfg := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.Context})
	rc, err := cfg.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("loading the host cluster's kubeconfig (set KUBECONFIG or --host-kubeconfig): %w", err)
	}
	ns := o.Namespace
	if ns == "" {
		if ns, _, err = cfg.Namespace(); err != nil {
			return nil, "", fmt.Errorf("reading the kubeconfig's namespace: %w", err)
		}
	}
	c, err := client.New(rc, client.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, "", fmt.Errorf("connecting to the host cluster: %w", err)
	}
	return c, ns, nil
}

type retryCleanupOptions struct {
	*AdminOptions
	Member string
	Wait   time.Duration
	poll   time.Duration
	now    func() time.Time
}

func newCmdRetryCleanup(a *AdminOptions) *cobra.Command {
	o := &retryCleanupOptions{AdminOptions: a, Wait: 2 * time.Minute, poll: time.Second, now: time.Now}
	cmd := &cobra.Command{
		Use:   "retry-cleanup MEMBER",
		Short: "Retry the teardown of a Quarantined member now, and say whether it was proven",
		Long: `A member bound with cleanupMode VerifiedDestroy whose teardown could not be
proven is Quarantined: it keeps counting against its pool's capacity and is
retried on a backoff (30s, doubling, at most 1h). Once you have removed what
kept it alive (see its receipt: kobe admin receipt MEMBER), retry-cleanup
asks the operator to retry at once (the kobe.kunobi.ninja/retry-cleanup
annotation) and waits for the verdict: the member gone with a proof, or
still Quarantined with what survived.`,
		Example: `  kobe admin retry-cleanup pool-ci-small-3 -n kobe-system`,
		Args:    exactArgs(1, "the name of a Quarantined ClusterInstance"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Member = args[0]
			if o.Wait < 0 {
				return fmt.Errorf("--wait must be 0 (do not wait) or positive, e.g. 2m (got %s)", o.Wait)
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().DurationVar(&o.Wait, "wait", o.Wait, "how long to wait for the operator's verdict; 0 returns once the retry is requested")
	return cmd
}

// Run requests the retry and waits for its verdict.
func (o *retryCleanupOptions) Run(ctx context.Context) error {
	c, ns, err := o.newClient(o.AdminOptions)
	if err != nil {
		return err
	}
	inst := &kobev1.ClusterInstance{}
	key := client.ObjectKey{Namespace: ns, Name: o.Member}
	if err := c.Get(ctx, key, inst); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("no ClusterInstance %q in namespace %q (is --namespace the operator's?)", o.Member, ns)
		}
		return fmt.Errorf("reading ClusterInstance %s: %w", o.Member, err)
	}
	if inst.Status.Phase != kobev1.InstanceQuarantined {
		return fmt.Errorf("member %s is %s, not Quarantined: there is no cleanup to retry", o.Member, dash(string(inst.Status.Phase)))
	}
	request := o.now().UTC().Format(time.RFC3339Nano)
	before := inst.DeepCopy()
	if inst.Annotations == nil {
		inst.Annotations = map[string]string{}
	}
	inst.Annotations[kobev1.AnnotationRetryCleanup] = request
	if err := c.Patch(ctx, inst, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("requesting the retry on %s: %w", o.Member, err)
	}
	p := &printer{w: o.streams.Out}
	if o.Wait == 0 {
		p.printf("retry of %s requested\n", o.Member)
		return p.err
	}
	var verdict *kobev1.ClusterInstance
	gone := false
	err = wait.PollUntilContextTimeout(ctx, o.poll, o.Wait, true, func(ctx context.Context) (bool, error) {
		got := &kobev1.ClusterInstance{}
		err := c.Get(ctx, key, got)
		switch {
		case apierrors.IsNotFound(err) || (err == nil && got.UID != inst.UID):
			gone = true
			return true, nil
		case err != nil:
			return false, nil // a transient read error; poll again
		}
		if st := got.Status.Cleanup; st != nil && st.RetryRequest == request && got.Status.Phase == kobev1.InstanceQuarantined {
			verdict = got
			return true, nil
		}
		return false, nil
	})
	switch {
	case gone:
		p.printf("%s: cleanup proven, member destroyed and its capacity freed; receipt in ConfigMap %s\n", o.Member, receiptOf(inst))
		return p.err
	case verdict != nil:
		st := verdict.Status.Cleanup
		return &ExitError{Code: 1, Err: fmt.Errorf("%s is still Quarantined after attempt %d: %s (receipt in ConfigMap %s)", o.Member, st.Attempts, st.Message, st.Receipt)}
	case errors.Is(err, context.DeadlineExceeded) || wait.Interrupted(err):
		return fmt.Errorf("no verdict on %s within %s: is the operator running? `kubectl -n %s get clusterinstance %s` shows its state", o.Member, o.Wait, ns, o.Member)
	}
	return err
}

func receiptOf(inst *kobev1.ClusterInstance) string {
	if st := inst.Status.Cleanup; st != nil && st.Receipt != "" {
		return st.Receipt
	}
	return cleanup.ReceiptName(inst)
}

type receiptOptions struct {
	*AdminOptions
	Name string
}

func newCmdReceipt(a *AdminOptions) *cobra.Command {
	o := &receiptOptions{AdminOptions: a}
	return &cobra.Command{
		Use:   "receipt NAME",
		Short: "Print the cleanup receipts of a member or a lease (JSON)",
		Long: `Print, as JSON, the cleanup receipts whose member, lease or ConfigMap is
NAME: every resource the member's backend recorded when it was built, and
whether its teardown proved it absent. Receipts are kept for
--cleanup-receipt-retention (30 days by default) after they were written.`,
		Example: `  kobe admin receipt pool-ci-small-3
  kobe admin receipt lease-0123456789ab`,
		Args: exactArgs(1, "a member, lease or receipt name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name = args[0]
			return o.Run(cmd.Context())
		},
	}
}

// Run prints the matching receipts, newest last.
func (o *receiptOptions) Run(ctx context.Context) error {
	c, ns, err := o.newClient(o.AdminOptions)
	if err != nil {
		return err
	}
	var list corev1.ConfigMapList
	if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{kobev1.LabelCleanupReceipt: "true"}); err != nil {
		return fmt.Errorf("listing cleanup receipts: %w", err)
	}
	var out []cleanup.Receipt
	for i := range list.Items {
		r, err := cleanup.Decode(&list.Items[i])
		if err != nil {
			warnf(o.streams.ErrOut, "skipping %v\n", err)
			continue
		}
		if list.Items[i].Name == o.Name || r.Member == o.Name || r.Lease == o.Name {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return fmt.Errorf("no cleanup receipt names %q in namespace %q: only leases with cleanupMode VerifiedDestroy have one", o.Name, ns)
	}
	slices.SortFunc(out, func(a, b cleanup.Receipt) int { return a.CheckedAt.Compare(b.CheckedAt) })
	return printJSON(o.streams.Out, out)
}

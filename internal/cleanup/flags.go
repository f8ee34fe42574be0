package cleanup

import (
	"errors"
	"flag"
	"time"
)

// Flags are the operator's flags of VerifiedDestroy receipts.
type Flags struct {
	// ReceiptRetention is how long a receipt is kept after it was last
	// written (the instance controller's ReceiptRetention).
	ReceiptRetention time.Duration
}

// Bind registers the flags on fs with their defaults.
func (f *Flags) Bind(fs *flag.FlagSet) {
	fs.DurationVar(&f.ReceiptRetention, "cleanup-receipt-retention", DefaultRetention, "How long the receipt of a VerifiedDestroy teardown (a ConfigMap kobe-cleanup-<member>-<uid>) is kept after it was last written. At least 720h (30 days).")
}

// Validate refuses a retention shorter than DefaultRetention.
func (f Flags) Validate() error {
	if f.ReceiptRetention < DefaultRetention {
		return errors.New("--cleanup-receipt-retention must be at least 720h (30 days): receipts must outlive the leases they prove")
	}
	return nil
}

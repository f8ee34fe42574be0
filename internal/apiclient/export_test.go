package apiclient

import (
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// SetPollInterval makes WaitBound poll c every d, for fast tests.
func SetPollInterval(c *Client, d time.Duration) {
	c.pollBackoff = wait.Backoff{Duration: d, Factor: 1, Steps: 1 << 30}
}

// SetLeaseWait sets how long WaitBound asks the server to hold each poll.
func SetLeaseWait(c *Client, d time.Duration) { c.leaseWait = d }

package backend

import (
	"fmt"
	"strconv"
)

// MaxNodes is the most real nodes a member may have (the CRD's maximum).
const MaxNodes = 4

// NodesDefault is an operator's --<backend>-default-nodes: how many nodes
// a member gets when its pool leaves nodes unset. Its zero value is 0.
type NodesDefault struct {
	// Auto: the backend decides from what its host can do.
	Auto  bool
	Count int32
}

// String implements flag.Value.
func (d *NodesDefault) String() string {
	if d.Auto {
		return "auto"
	}
	return strconv.Itoa(int(d.Count))
}

// Set implements flag.Value: "auto" or a count from 0 to MaxNodes.
func (d *NodesDefault) Set(s string) error {
	if s == "auto" {
		*d = NodesDefault{Auto: true}
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > MaxNodes {
		return fmt.Errorf("%q: want auto or a number of nodes from 0 to %d", s, MaxNodes)
	}
	*d = NodesDefault{Count: int32(n)}
	return nil
}

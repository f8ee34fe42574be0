// Package deps checks, when a reconciler is set up, that every dependency it
// needs was given, so that a wiring mistake fails at start with the names of
// what is missing instead of a nil-pointer panic at the first reconcile. It
// holds no reconcile logic.
package deps

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrMissing is wrapped by Require's error.
var ErrMissing = errors.New("missing dependency")

// Require returns an error naming, in sorted order, every entry of absent
// that is true; nil when none is. absent maps a field name to "is it unset".
func Require(controller string, absent map[string]bool) error {
	var missing []string
	for name, isAbsent := range absent {
		if isAbsent {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	slices.Sort(missing)
	return fmt.Errorf("%s: %w: missing %s", controller, ErrMissing, strings.Join(missing, ", "))
}

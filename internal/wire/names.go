package wire

import (
	"fmt"
	"regexp"
)

// MaxAliasLength bounds an alias; it is stored as a label value.
const MaxAliasLength = 63

var (
	leaseIDPattern = regexp.MustCompile(`^lease-[0-9a-f]{12}$`)
	aliasPattern   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$`)
)

// IsLeaseID reports whether s has the form of a lease id ("lease-" and 12
// lower-case hex digits).
func IsLeaseID(s string) bool { return leaseIDPattern.MatchString(s) }

// ValidateAlias says why s cannot be an alias, or nil: an alias has 1-63
// characters of [a-z0-9-_.], starts and ends with [a-z0-9], and does not
// look like a lease id (which would make /v1/leases/{id} ambiguous).
func ValidateAlias(s string) error {
	switch {
	case s == "" || len(s) > MaxAliasLength:
		return fmt.Errorf("alias %q must have 1 to %d characters", s, MaxAliasLength)
	case !aliasPattern.MatchString(s):
		return fmt.Errorf("alias %q must be lower-case letters, digits, '-', '_' or '.', starting and ending with a letter or digit", s)
	case IsLeaseID(s):
		return fmt.Errorf("alias %q has the form of a lease id; choose another", s)
	}
	return nil
}

// ValidateLeaseRef says why s, from /v1/leases/{id}, is neither a lease id
// nor an alias, or nil.
func ValidateLeaseRef(s string) error {
	if IsLeaseID(s) {
		return nil
	}
	if ValidateAlias(s) != nil {
		return fmt.Errorf("%q is neither a lease id (lease- and 12 hex digits) nor an alias", s)
	}
	return nil
}

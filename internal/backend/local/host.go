package local

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// bootIDFile holds the kernel's random ID of the current boot; in a
// container it is the node's, so it tells nodes (and boots) apart where the
// host name (a pod's name) may not.
const bootIDFile = "/proc/sys/kernel/random/boot_id"

// Host names the host and boot this backend runs members on,
// "<hostname>/<boot id>" (Options.Host when set). Members are processes of
// this host's current boot and files on its disk: the operator records it on
// each member before creating it (kobev1.AnnotationHost) and refuses to
// observe or destroy, from anywhere else, a member recorded elsewhere.
func (b *Backend) Host() string { return b.opts.Host }

// hostIdentity is "<hostname>/<boot id>" of the machine this runs on.
func hostIdentity() (string, error) {
	name, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("reading the host name: %w", err)
	}
	boot, err := os.ReadFile(bootIDFile)
	if err != nil {
		return "", fmt.Errorf("reading the boot ID: %w", err)
	}
	id := strings.TrimSpace(string(boot))
	if name == "" || id == "" {
		return "", errors.New("the host name or the boot ID is empty")
	}
	return name + "/" + id, nil
}

// Command membersweep destroys every local member under a data directory,
// as the operator's start-up sweep destroys members no ClusterInstance owns:
// processes (by the member's cgroup, node containers included), cgroups,
// network, control-plane fence, mounts and file system, directory. `make
// run` runs it when it stops, for what its operator did not destroy (a
// forced stop kills the operator first), and when it starts, for what an
// earlier run left.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kunobi-ninja/kobe/internal/backend/local"
)

func main() {
	dir := flag.String("data-dir", "", "The local backend's data directory (the operator's --local-data-dir).")
	timeout := flag.Duration("timeout", time.Minute, "How long the sweep may take.")
	flag.Parse()
	if err := run(*dir, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "membersweep:", err)
		os.Exit(1)
	}
}

func run(dir string, timeout time.Duration) error {
	if dir == "" {
		return fmt.Errorf("--data-dir is required")
	}
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		return nil
	}
	log := funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{})
	b, err := local.New(local.Options{DataRoot: dir, Logger: log})
	if err != nil {
		return err
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	removed, err := b.Sweep(ctx, func(string, types.UID) bool { return false })
	for _, r := range removed {
		fmt.Println("destroyed", r)
	}
	return err
}

package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"
)

// probeTimeout bounds each name's lookup: a probe pod that cannot resolve
// fails and is tried again by the gate, it does not hang.
const probeTimeout = 5 * time.Second

// probe resolves every name with the Go resolver (the pod's
// /etc/resolv.conf: the member's cluster DNS and its search domains) and
// returns the exit code: 0 when all have an address, 1 otherwise, 2 for a
// call without names.
func probe(names []string) int {
	if len(names) == 0 {
		fmt.Fprintln(os.Stderr, "usage: coredns probe NAME...")
		return 2
	}
	code := 0
	for _, name := range names {
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		addrs, err := net.DefaultResolver.LookupHost(ctx, name)
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			code = 1
			continue
		}
		fmt.Printf("%s: %v\n", name, addrs)
	}
	return code
}

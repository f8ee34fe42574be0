package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"
)

const (
	// probeFor is how long each name is tried: the gate starts the probe
	// while CoreDNS may still be starting, and a probe that cannot resolve
	// by then fails (the gate tries again); it never hangs.
	probeFor = 30 * time.Second
	// retryEvery spaces the tries.
	retryEvery = 100 * time.Millisecond
)

// lookupTimeout bounds one lookup, by how long the name has been tried: an
// answering cluster DNS takes milliseconds, and a query sent before
// kube-proxy routes the Service is lost, so for the first seconds a short
// wait lets the next try go soon after the route appears; later, longer
// waits still let a resolver on a loaded machine answer.
func lookupTimeout(trying time.Duration) time.Duration {
	switch {
	case trying < 8*time.Second:
		return 250 * time.Millisecond
	case trying < 16*time.Second:
		return time.Second
	}
	return 2 * time.Second
}

// probe resolves every name with the Go resolver (the pod's
// /etc/resolv.conf: the member's cluster DNS and its search domains),
// trying each until it resolves or probeFor has passed, and returns the
// exit code: 0 when all have an address, 1 otherwise, 2 for a call without
// names.
func probe(names []string) int {
	if len(names) == 0 {
		fmt.Fprintln(os.Stderr, "usage: coredns probe NAME...")
		return 2
	}
	deadline := time.Now().Add(probeFor)
	code := 0
	for _, name := range names {
		addrs, err := lookup(name, deadline)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			code = 1
			continue
		}
		fmt.Printf("%s: %v\n", name, addrs)
	}
	return code
}

// lookup resolves name, again and again until the deadline.
func lookup(name string, deadline time.Time) ([]string, error) {
	start := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout(time.Since(start)))
		addrs, err := net.DefaultResolver.LookupHost(ctx, name)
		cancel()
		if err == nil || time.Now().Add(retryEvery).After(deadline) {
			return addrs, err
		}
		time.Sleep(retryEvery) // a resolver that is starting: try again shortly
	}
}

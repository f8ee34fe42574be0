package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"time"
)

// The appetite subcommands are what a hostile lease holder runs to exhaust
// the machine (issue 42); a bounded member makes them fail inside it.

// spawn starts `testapp hold SECONDS` children until a start fails or max
// are running, and prints how many it started and why it stopped. Exit 0
// when a start failed (the bound held), 1 when max were started.
func spawn(maxArg, holdArg string) error {
	limit, err := strconv.Atoi(maxArg)
	if err != nil {
		return fmt.Errorf("spawn: MAX %q: %w", maxArg, err)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// No goroutine waits for a child: each would hold an OS thread in
	// wait4, and this process would run out of threads before the member
	// runs out of processes. The children outlive it (the pod's first
	// process inherits them) and hold their pids for SECONDS.
	runtime.GOMAXPROCS(1)
	for n := range limit {
		cmd := exec.Command(self, "hold", holdArg)
		if err := cmd.Start(); err != nil {
			fmt.Printf("spawned %d, then: %v\n", n, err)
			return nil
		}
	}
	return fmt.Errorf("spawned %d processes and none was refused", limit)
}

// hold sleeps SECONDS.
func hold(arg string) error {
	s, err := strconv.Atoi(arg)
	if err != nil {
		return fmt.Errorf("hold: SECONDS %q: %w", arg, err)
	}
	time.Sleep(time.Duration(s) * time.Second)
	return nil
}

// eat allocates and touches memory 64 MiB at a time up to MAX MiB,
// printing each step. A bounded member's kernel kills it on the way
// (exit 137); reaching MAX exits 1.
func eat(maxArg string) error {
	limit, err := strconv.Atoi(maxArg)
	if err != nil {
		return fmt.Errorf("eat: MAX %q: %w", maxArg, err)
	}
	const chunk = 64 << 20
	var kept [][]byte
	for mib := 0; mib < limit; mib += chunk >> 20 {
		b := make([]byte, chunk)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		kept = append(kept, b)
		fmt.Printf("holding %d MiB\n", mib+chunk>>20)
	}
	if len(kept) > 0 {
		return errors.New("allocated everything asked and nothing stopped it")
	}
	return nil
}

// fill writes PATH 64 MiB at a time up to MAX MiB, syncing each chunk, and
// prints how far it got and why it stopped. Exit 0 when a write failed (the
// bound held), 1 when MAX MiB were written.
func fill(path, maxArg string) error {
	limit, err := strconv.Atoi(maxArg)
	if err != nil {
		return fmt.Errorf("fill: MAX %q: %w", maxArg, err)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	chunk := make([]byte, 64<<20)
	for i := range chunk {
		chunk[i] = byte(i) // not zeros: nothing may store it sparse
	}
	for mib := 0; mib < limit; mib += 64 {
		_, err := f.Write(chunk)
		if err == nil {
			err = f.Sync()
		}
		if err != nil {
			fmt.Printf("wrote %d MiB, then: %v\n", mib, err)
			return nil
		}
	}
	return fmt.Errorf("wrote %d MiB and no write was refused", limit)
}

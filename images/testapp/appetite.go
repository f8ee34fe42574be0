package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
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
	for n := range limit {
		cmd := exec.Command(self, "hold", holdArg)
		if err := cmd.Start(); err != nil {
			fmt.Printf("spawned %d, then: %v\n", n, err)
			return nil
		}
		// Reaped in the background: the children hold their pids until
		// they exit, whatever this process does.
		go func() { _ = cmd.Wait() }()
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

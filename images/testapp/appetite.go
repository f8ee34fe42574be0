package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
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

// inotify takes inotify instances until MAX are held or the machine
// refuses one; its children hold them SECONDS after it exits. The instances are counted per user
// of the whole machine, and a pod's root is the host's. One process holds
// at most its open-file limit, so it starts `testapp inotify-hold` children
// that each take what they can and say how many. It prints how many it
// holds and why it stopped. Exit 0 when it reached MAX (the machine's
// limit was beyond it), 1 when the machine refused one first.
func inotify(maxArg, holdArg string) error {
	limit, err := strconv.Atoi(maxArg)
	if err != nil {
		return fmt.Errorf("inotify: MAX %q: %w", maxArg, err)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	held := 0
	for held < limit {
		cmd := exec.Command(self, "inotify-hold", strconv.Itoa(limit-held), holdArg)
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("held %d inotify instances, then starting a holder: %w", held, err)
		}
		var n int
		var why string
		if _, err := fmt.Fscanf(out, "%d %q\n", &n, &why); err != nil {
			return fmt.Errorf("held %d inotify instances, then a holder said nothing: %w", held, err)
		}
		held += n
		// A holder stops at its own open-file limit (EMFILE after many) or
		// at the machine's (EMFILE or ENOMEM after few, or none).
		if why != "" && n < 64 {
			return fmt.Errorf("held %d inotify instances, then: %s", held, why)
		}
	}
	fmt.Printf("held %d inotify instances\n", held)
	return nil
}

// inotifyHold takes up to MAX inotify instances, prints how many and why
// it stopped ("" when it reached MAX), and holds them SECONDS.
func inotifyHold(maxArg, holdArg string) error {
	limit, err := strconv.Atoi(maxArg)
	if err != nil {
		return fmt.Errorf("inotify-hold: MAX %q: %w", maxArg, err)
	}
	n, why := 0, ""
	for ; n < limit; n++ {
		if _, err := syscall.InotifyInit1(syscall.IN_CLOEXEC); err != nil {
			why = err.Error()
			break
		}
	}
	fmt.Printf("%d %q\n", n, why)
	return hold(holdArg)
}

package local

// tuning holds command-line flags and environment variables that make a
// member smaller or faster without changing what it does for a user.
// defaultTuning's choices are measured in docs/benchmarks.md
// (BenchmarkMeasureMember); measurements compare them against an empty tuning.
type tuning struct {
	// args are appended to each component's command line.
	args map[string][]string
	// env is added to each component's environment.
	env map[string][]string
}

func defaultTuning() tuning {
	return tuning{
		args: map[string][]string{
			compEtcd: {
				// A member dies with its host (Observe reports Failed after a
				// reboot because its processes are gone), so fsync buys
				// nothing and costs start-up time.
				"--unsafe-no-fsync=true",
				// The default keeps 10000 raft entries in memory between
				// snapshots; a test cluster's write rate needs far fewer.
				"--snapshot-count=1000",
			},
			compAPIServer: {"--profiling=false"},
			compKCM:       {"--profiling=false"},
			compScheduler: {"--profiling=false"},
		},
		// Collecting garbage at 50% heap growth instead of 100% takes about
		// 27 MiB off a member's private memory (kube-apiserver's heap is
		// most of it) for no measurable idle CPU. GOGC=30 saves 55 MiB but
		// triples collections under load; see docs/benchmarks.md.
		// kube-apiserver, the largest heap, collects at 40%: about 10 MiB
		// less for a member with a node, which keeps one under 300 MiB
		// private, at a quarter more collections of its heap alone.
		env: map[string][]string{
			compEtcd:      {"GOGC=50"},
			compAPIServer: {"GOGC=40"},
			compKCM:       {"GOGC=50"},
			compScheduler: {"GOGC=50"},
			compKwok:      {"GOGC=50"},
		},
	}
}

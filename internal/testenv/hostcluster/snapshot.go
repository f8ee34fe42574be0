package hostcluster

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// snapshotSysctls are the sysctls a node may change: the four kubelet and
// the bridge plugin set, and those kube-proxy sets in some configurations.
var snapshotSysctls = append(slices.Clone(changedSysctls),
	"net.ipv4.conf.all.route_localnet",
	"net.netfilter.nf_conntrack_max",
	"net.bridge.bridge-nf-call-iptables",
)

// Snapshot is the machine state a node changes, section by section, each a
// sorted list of lines: sysctls, mounts, links, routes, rules (iptables,
// ip6tables and nftables), cgroups, network namespaces, host paths.
type Snapshot map[string][]string

// TakeSnapshot reads the machine state that Teardown must restore.
func TakeSnapshot(ctx context.Context) (Snapshot, error) {
	s := Snapshot{}
	var sys []string
	for _, k := range snapshotSysctls {
		v, err := readSysctl(k)
		if err != nil {
			v = "(absent)"
		}
		sys = append(sys, k+"="+v)
	}
	s["sysctls"] = sys

	mounts, err := mountLines()
	if err != nil {
		return nil, err
	}
	s["mounts"] = mounts

	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for _, i := range ifs {
		s["links"] = append(s["links"], fmt.Sprintf("%s %s", i.Name, i.Flags))
	}

	for _, args := range [][]string{{"-4", "route", "show", "table", "all"}, {"-6", "route", "show", "table", "all"}} {
		out, err := run(ctx, "ip", args...)
		if err != nil {
			return nil, err
		}
		s["routes"] = append(s["routes"], lines(out)...)
	}

	for _, cmd := range [][]string{{"iptables-save"}, {"ip6tables-save"}, {"nft", "list", "ruleset"}} {
		out, err := run(ctx, cmd[0], cmd[1:]...)
		if err != nil {
			return nil, err
		}
		for _, l := range lines(out) {
			if strings.HasPrefix(l, "#") {
				continue // iptables-save's dated header and footer
			}
			s["rules"] = append(s["rules"], cmd[0]+": "+counters.ReplaceAllString(l, "[]"))
		}
	}

	for _, root := range cgroupRoots() {
		entries, _ := os.ReadDir(root)
		for _, e := range entries {
			if e.IsDir() {
				s["cgroups"] = append(s["cgroups"], filepath.Join(root, e.Name()))
			}
		}
	}

	netns, _ := os.ReadDir("/run/netns")
	for _, e := range netns {
		s["netns"] = append(s["netns"], e.Name())
	}

	for _, p := range hostPaths {
		if _, err := os.Lstat(p); err == nil {
			s["paths"] = append(s["paths"], p)
		}
	}
	for _, v := range s {
		sort.Strings(v)
	}
	return s, nil
}

// counters are iptables-save's packet and byte counters ([0:0]).
var counters = regexp.MustCompile(`\[\d+:\d+\]`)

// mountLines are the mounts as "mountpoint fstype source", without the
// IDs that change from one mount to the next.
func mountLines() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 0 || len(fields) < sep+3 || len(fields) < 5 {
			continue
		}
		out = append(out, fmt.Sprintf("%s %s %s", unescapeMount(fields[4]), fields[sep+1], fields[sep+2]))
	}
	return out, sc.Err()
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimRight(l, " "); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// Diff describes how after differs from s, section by section ("" when
// they are equal): lines only before are marked "-", only after "+".
func (s Snapshot) Diff(after Snapshot) string {
	var b strings.Builder
	keys := map[string]bool{}
	for k := range s {
		keys[k] = true
	}
	for k := range after {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		before, now := count(s[k]), count(after[k])
		var d []string
		for l, n := range before {
			if now[l] < n {
				d = append(d, "- "+l)
			}
		}
		for l, n := range now {
			if before[l] < n {
				d = append(d, "+ "+l)
			}
		}
		if len(d) == 0 {
			continue
		}
		sort.Strings(d)
		fmt.Fprintf(&b, "%s:\n  %s\n", k, strings.Join(d, "\n  "))
	}
	return b.String()
}

func count(ls []string) map[string]int {
	m := map[string]int{}
	for _, l := range ls {
		m[l]++
	}
	return m
}

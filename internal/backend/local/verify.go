package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/node"
)

// Kinds of the resources in a local member's creation manifest.
const (
	// KindProcess: name is the component, id "<pid>@<start ticks>".
	KindProcess = "Process"
	// KindPort: name is the component listening, id "<host>:<port>".
	KindPort = "Port"
	// KindPath: name is a path on the host; the member's data directory
	// holds its client CA key, so its absence proves the lease's
	// certificates can never be signed again.
	KindPath = "Path"
	// KindCgroup: name is the member's cgroup (relative to each
	// hierarchy's root).
	KindCgroup = "Cgroup"
)

var _ backend.Verifier = (*Backend)(nil)

// Manifest implements backend.Verifier: the member's processes (pid and
// start time, read from /proc now), its API server's port, its data
// directory, its file system's image and, when it is confined or has
// nodes, its cgroup.
func (b *Backend) Manifest(_ context.Context, m backend.Member) ([]kobev1.ManifestResource, error) {
	if err := validMember(m); err != nil {
		return nil, err
	}
	rt := b.member(m.UID)
	p := b.paths(m)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	st, err := readState(p)
	if err != nil {
		return nil, fmt.Errorf("reading the state of %s: %w", p.dir, err)
	}
	var out []kobev1.ManifestResource
	for _, pr := range st.Processes {
		info, ok := readProc(pr.PID)
		if !ok || info.zombie || !info.isOurs(p.dir) {
			return nil, fmt.Errorf("%s (pid %d) is not running: the member is not whole", pr.logName(), pr.PID)
		}
		out = append(out, kobev1.ManifestResource{Kind: KindProcess, Name: pr.logName(), ID: processID(pr.PID, info.startTicks)})
	}
	host := st.LocalHost
	if host == "" {
		host = "127.0.0.1"
	}
	out = append(out, kobev1.ManifestResource{Kind: KindPort, Name: compAPIServer, ID: net.JoinHostPort(host, strconv.Itoa(st.APIServerPort))})
	out = append(out, kobev1.ManifestResource{Kind: KindPath, Name: p.dir})
	if _, err := os.Stat(p.diskImage()); err == nil {
		out = append(out, kobev1.ManifestResource{Kind: KindPath, Name: p.diskImage()})
	}
	if st.Nodes > 0 || st.Confined {
		out = append(out, kobev1.ManifestResource{Kind: KindCgroup, Name: NodeCgroup(string(m.UID))})
	}
	return out, nil
}

func processID(pid int, startTicks uint64) string {
	return strconv.Itoa(pid) + "@" + strconv.FormatUint(startTicks, 10)
}

// Verify implements backend.Verifier: each recorded resource, then any
// process still referring to the member's directory (one started after the
// manifest was recorded, a restarted component).
func (b *Backend) Verify(_ context.Context, m backend.Member, manifest []kobev1.ManifestResource) ([]backend.Check, error) {
	if err := validMember(m); err != nil {
		return nil, err
	}
	p := b.paths(m)
	survivors, err := scanProcs(p.dir)
	if err != nil {
		return nil, err
	}
	checks := make([]backend.Check, 0, len(manifest)+len(survivors))
	for _, r := range manifest {
		absent, detail, err := b.verifyOne(r, survivors)
		if err != nil {
			return nil, fmt.Errorf("checking %s %s: %w", r.Kind, r.Name, err)
		}
		checks = append(checks, backend.Check{ManifestResource: r, Absent: absent, Detail: detail})
	}
	for _, pr := range survivors {
		checks = append(checks, backend.Check{
			ManifestResource: kobev1.ManifestResource{Kind: KindProcess, Name: pr.component(), ID: processID(pr.pid, pr.startTicks)},
			Detail:           "still running and refers to " + p.dir + " (not in the creation manifest)",
		})
	}
	return checks, nil
}

func (b *Backend) verifyOne(r kobev1.ManifestResource, survivors []procInfo) (absent bool, detail string, err error) {
	switch r.Kind {
	case KindProcess:
		return verifyProcess(r.ID)
	case KindPort:
		return verifyPort(r.ID, len(survivors) == 0)
	case KindPath:
		_, err := os.Lstat(r.Name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return true, "does not exist", nil
		case err != nil:
			return false, "", err
		}
		return false, "still exists", nil
	case KindCgroup:
		paths, err := node.CgroupPaths(r.Name)
		if err != nil {
			return false, "", err
		}
		if len(paths) == 0 {
			return true, "exists in no cgroup hierarchy", nil
		}
		return false, "still exists: " + strings.Join(paths, ", "), nil
	}
	return false, "the local backend cannot check a resource of kind " + r.Kind, nil
}

// verifyProcess proves the process "<pid>@<start ticks>" gone: no such pid,
// a zombie, or a pid now held by a process that started at another time.
func verifyProcess(id string) (bool, string, error) {
	pidText, ticksText, ok := strings.Cut(id, "@")
	pid, err1 := strconv.Atoi(pidText)
	ticks, err2 := strconv.ParseUint(ticksText, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return false, "", fmt.Errorf("malformed process id %q", id)
	}
	info, running := readProc(pid)
	switch {
	case !running:
		return true, "no process has that pid", nil
	case info.startTicks != ticks:
		return true, fmt.Sprintf("pid %d now belongs to another process (started at tick %d)", pid, info.startTicks), nil
	case info.zombie:
		return true, "exited (a zombie awaiting its parent holds only the pid)", nil
	}
	return false, "still running", nil
}

// verifyPort proves the member no longer listens on "<host>:<port>":
// nothing listens on the port, or what listens is not the member's (no
// process of the member is left, memberGone).
func verifyPort(id string, memberGone bool) (bool, string, error) {
	_, portText, err := net.SplitHostPort(id)
	if err != nil {
		return false, "", err
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return false, "", fmt.Errorf("malformed port in %q: %w", id, err)
	}
	listening, err := tcpListening(uint16(port))
	if err != nil {
		return false, "", err
	}
	switch {
	case !listening:
		return true, "nothing listens on the port", nil
	case memberGone:
		return true, "another program listens on the port now; no process of the member is left", nil
	}
	return false, "still listened on while processes of the member run", nil
}

// tcpListening reports whether any socket on this host's network namespace
// listens on TCP port (IPv4 or IPv6).
func tcpListening(port uint16) (bool, error) {
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		ok, err := listensIn(f, port)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

// listenState is TCP_LISTEN in /proc/net/tcp's st column.
const listenState = "0A"

func listensIn(file string, port uint16) (bool, error) {
	f, err := os.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil // no IPv6 on this host
	}
	if err != nil {
		return false, err
	}
	defer func() { _ = f.Close() }()
	want := fmt.Sprintf(":%04X", port)
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 3 && fields[3] == listenState && strings.HasSuffix(fields[1], want) {
			return true, nil
		}
	}
	return false, sc.Err()
}

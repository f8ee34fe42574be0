package local

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kunobi-ninja/kobe/internal/addressguard"
	"github.com/kunobi-ninja/kobe/internal/node"
	"github.com/kunobi-ninja/kobe/internal/podsecurity"
)

// Unix sockets of the member's etcd, relative to the data directory (the
// working directory of etcd and kube-apiserver). etcd wants host:port even
// for unix URLs, hence the ":0". Sockets keep etcd off the network: only
// processes that can enter the (0700) data directory reach it, and there is
// no port to collide.
const (
	etcdClientURL = "unix://etcd-client.sock:0"
	etcdPeerURL   = "unix://etcd-peer.sock:0"
)

// etcdQuota is etcd's --quota-backend-bytes (etcd's own default, made
// explicit, as the kubernetes backend's): past it etcd refuses writes
// instead of growing.
const etcdQuota = 2 << 30

// componentArgs returns the command line of component c (without argv[0]).
func (b *Backend) componentArgs(p paths, st *state, c string) ([]string, error) {
	switch c {
	case compEtcd:
		return append([]string{
			"--name=member",
			"--data-dir=" + p.etcdData(),
			"--listen-client-urls=" + etcdClientURL,
			"--advertise-client-urls=" + etcdClientURL,
			"--listen-peer-urls=" + etcdPeerURL,
			"--initial-advertise-peer-urls=" + etcdPeerURL,
			"--initial-cluster=member=" + etcdPeerURL,
			"--initial-cluster-state=new",
			"--quota-backend-bytes=" + strconv.Itoa(etcdQuota),
			"--log-level=warn",
		}, b.tuning.args[c]...), nil
	case compAPIServer:
		bind := "127.0.0.1"
		switch {
		case !isLoopbackHost(b.opts.AdvertiseHost):
			bind = "0.0.0.0"
		case st.Nodes > 0:
			bind = st.LocalHost
		}
		args := []string{
			"--etcd-servers=" + etcdClientURL,
			"--bind-address=" + bind,
			"--secure-port=" + strconv.Itoa(st.APIServerPort),
			"--cert-dir=" + filepath.Dir(p.pki("x")),
			"--tls-cert-file=" + p.pki(apiserverCert),
			"--tls-private-key-file=" + p.pki(apiserverKey),
			"--client-ca-file=" + p.pki(clientCACert),
			"--service-account-issuer=" + saIssuer,
			"--service-account-key-file=" + p.pki(serviceAccountPub),
			"--service-account-signing-key-file=" + p.pki(serviceAccountKey),
			// Pod Security (the admission configuration's level in every
			// namespace) decides which pods may be privileged.
			"--allow-privileged=true",
			"--admission-control-config-file=" + p.admissionConfig(),
		}
		versionFlags, err := podsecurity.APIServerFlags(b.versionOrDefault(st.KubernetesVersion))
		if err != nil {
			return nil, err
		}
		args = append(args, versionFlags...)
		args = append(args, addressguard.APIServerFlags()...)
		if st.Nodes == 0 {
			args = append(args, "--authorization-mode=RBAC", "--service-cluster-ip-range="+serviceCIDR, "--enable-admission-plugins=PodSecurity")
			if ip := net.ParseIP(b.opts.AdvertiseHost); ip != nil && !ip.IsLoopback() {
				args = append(args, "--advertise-address="+ip.String())
			}
			return append(args, b.tuning.args[c]...), nil
		}
		mn, err := memberNet(st)
		if err != nil {
			return nil, err
		}
		// Pods reach the API server through the "kubernetes" Service,
		// whose endpoint is the advertised address: the member's gateway.
		// Kubelets are reached by their InternalIP (no DNS for node
		// names), with a certificate they trust, and their serving
		// certificates are checked against the client CA that signed them.
		args = append(args,
			"--advertise-address="+mn.Gateway.String(),
			"--service-cluster-ip-range="+mn.ServiceCIDR.String(),
			"--authorization-mode=Node,RBAC",
			"--enable-admission-plugins=NodeRestriction,PodSecurity",
			"--kubelet-client-certificate="+p.pki(kubeletClientCert),
			"--kubelet-client-key="+p.pki(kubeletClientKey),
			"--kubelet-certificate-authority="+p.pki(clientCACert),
			// InternalIP only: the address guard holds it to the member's
			// link; a Hostname address could name anything.
			"--kubelet-preferred-address-types=InternalIP",
		)
		return append(args, b.tuning.args[c]...), nil
	case compKCM:
		return append([]string{
			"--kubeconfig=" + p.kubeconfig(compKCM),
			"--service-account-private-key-file=" + p.pki(serviceAccountKey),
			"--root-ca-file=" + p.pki(serverCACert),
			"--use-service-account-credentials=true",
			// "*" is every controller that is on by default: among them
			// serviceaccount (a namespace's "default" ServiceAccount),
			// root-ca-cert-publisher (kube-root-ca.crt), deployment,
			// replicaset, garbage collector and namespace deletion.
			"--controllers=*",
			"--leader-elect=false",
			// Its start creates a ServiceAccount and requests a token for
			// each of some 35 controllers (use-service-account-credentials)
			// before any runs: at the default 20 requests a second that
			// took about 3 s of every member's time to Ready
			// (docs/benchmarks.md). A member serves one user; a burst at
			// start costs it nothing.
			"--kube-api-qps=200",
			"--kube-api-burst=400",
			"--secure-port=0",
		}, b.tuning.args[c]...), nil
	case compScheduler:
		// The configuration holds the kubeconfig and leader election too:
		// with --config, kube-scheduler ignores those flags.
		return append([]string{
			"--config=" + p.schedulerConfig(),
			"--secure-port=0",
		}, b.tuning.args[c]...), nil
	case compKwok:
		return b.kwokArgs(p, st)
	}
	return nil, fmt.Errorf("unknown component %s", c)
}

// componentEnv is the environment of component c. Children do not inherit
// the operator's environment: it may hold credentials, and KUBECONFIG or
// proxy settings would change how components behave.
func (b *Backend) componentEnv(p paths, c string) []string {
	// HOME is the member's directory: kwok reads ~/.kwok.
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + p.dir}
	if v, ok := b.tuning.env[c]; ok {
		env = append(env, v...)
	}
	return env
}

// startComponent starts component c of a member as a child in its own
// process group (so that it outlives the operator and a signal to the
// operator's group does not reach it), with output appended to its log file.
// A goroutine reaps it.
func (b *Backend) startComponent(rt *memberRT, p paths, st *state, c string) (process, error) {
	bin := filepath.Join(b.binDir(st.KubernetesVersion), c)
	args, err := b.componentArgs(p, st, c)
	if err != nil {
		return process{}, err
	}
	if err := os.MkdirAll(filepath.Dir(p.log(c)), 0o700); err != nil {
		return process{}, err
	}
	logf, err := os.OpenFile(p.log(c), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return process{}, fmt.Errorf("opening log of %s: %w", c, err)
	}
	defer func() { _ = logf.Close() }()
	fmt.Fprintf(logf, "--- kobe: starting %s (attempt %d) at %s\n", c, st.Attempt, time.Now().UTC().Format(time.RFC3339Nano))

	cmd := exec.Command(bin, args...)
	cmd.Dir = p.dir
	cmd.Env = b.componentEnv(p, c)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := startNiced(cmd, b.opts.MemberNice); err != nil {
		return process{}, fmt.Errorf("starting %s: %w", c, err)
	}
	ch := &child{done: make(chan struct{})}
	rt.children[cmd.Process.Pid] = ch
	go func() {
		ch.err = cmd.Wait()
		close(ch.done)
	}()
	if st.Confined {
		// Before it answers anyone: nothing a holder asks of it runs
		// outside the member's limits.
		if err := node.JoinCgroup(cpCgroup(string(st.UID)), cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
			return process{}, fmt.Errorf("moving %s into the member's cgroup: %w", c, err)
		}
	}
	return process{Component: c, PID: cmd.Process.Pid, StartedAt: time.Now().UTC()}, nil
}

// child is a process this Backend started and reaps.
type child struct {
	done chan struct{}
	err  error // set before done is closed
}

func (c *child) exited() (bool, error) {
	select {
	case <-c.done:
		return true, c.err
	default:
		return false, nil
	}
}

// freePort asks the kernel for a free TCP port on host. Another process may
// take it before the API server binds it; the start-up supervisor then
// starts again with a new one.
func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	return port, nil
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// bindFailed reports whether component c's log shows that it could not bind
// its address, which a new port cures.
func bindFailed(p paths, c string) bool {
	data, err := readTail(p.log(c), 64<<10)
	if err != nil {
		return false
	}
	// Only the current attempt's output counts.
	if i := strings.LastIndex(string(data), "--- kobe: starting"); i >= 0 {
		data = data[i:]
	}
	return strings.Contains(string(data), "address already in use")
}

// lastLogLine returns the last non-empty line of component c's log, cut
// short, for messages to humans.
func lastLogLine(p paths, c string) string {
	data, err := readTail(p.log(c), 8<<10)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	line := strings.TrimSpace(lines[len(lines)-1])
	if len(line) > 300 {
		line = line[:300] + "..."
	}
	return line
}

func readTail(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := max(fi.Size()-n, 0)
	buf := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil {
		return nil, err
	}
	return buf, nil
}

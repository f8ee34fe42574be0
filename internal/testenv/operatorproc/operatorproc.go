package operatorproc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// Build compiles ./cmd/kobe-operator of the repository into dir and returns
// the binary's path. The build cache makes a second build cheap, and the
// binary is always the tree's, never a stale bin/kobe-operator.
func Build(dir string) (string, error) {
	if err := testenv.BuildCommands(dir, "kobe-operator"); err != nil {
		return "", err
	}
	return filepath.Join(dir, "kobe-operator"), nil
}

// Options describe one operator process.
type Options struct {
	// Binary is the kobe-operator to run (see Build).
	Binary string
	// Kubeconfig is the API server the operator talks to (testenv's
	// Env.Kubeconfig, or a proxy in front of it).
	Kubeconfig string
	// Namespace the operator serves.
	Namespace string
	// Dir holds the process's log (<Name>.log) and, unless DataDir says
	// otherwise, the local backend's member data (<Name>-members).
	Dir string
	// DataDir is --local-data-dir when the test looks into it.
	DataDir string
	// Name tells this process apart in file names and messages; default
	// "operator".
	Name string
	// TLS, when set, serves the lease API over HTTPS: APIURL is then
	// https://, and WaitReady and GetStatus trust TLS.CAFile.
	TLS *TLS
	// Args are extra flags, after the ones Start sets (a later flag wins).
	Args []string
}

// TLS are the PEM files of the API's serving certificate.
type TLS struct {
	CertFile, KeyFile string
	// CAFile signed CertFile; it is also --api-tls-ca-file.
	CAFile string
}

// Process is a running kobe-operator.
type Process struct {
	Name    string
	LogPath string
	// APIURL, MetricsURL and ProbeURL are http://127.0.0.1:<port> of the
	// lease API, the metrics endpoint and the /healthz and /readyz probes.
	APIURL, MetricsURL, ProbeURL string

	opts    Options
	ports   [3]int // API, metrics, probes
	client  *http.Client
	cmd     *exec.Cmd
	done    chan struct{}
	mu      sync.Mutex
	exitErr error
}

// Start runs the operator with loopback ports of its own, the local backend
// pointed at testenv's binaries and a data directory under Dir, and
// o.Args. It does not wait for readiness: see WaitReady.
func Start(o Options) (*Process, error) {
	if o.Name == "" {
		o.Name = "operator"
	}
	if o.DataDir == "" {
		o.DataDir = filepath.Join(o.Dir, o.Name+"-members")
	}
	var ports [3]int
	for i := range ports {
		p, err := testenv.FreePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	return start(o, ports)
}

// Restart starts the operator again, after Stop or Kill, with the same
// options and ports (clients keep their URLs); the log goes on in the same
// file.
func (p *Process) Restart() (*Process, error) {
	select {
	case <-p.done:
	default:
		return nil, fmt.Errorf("restarting %s: it still runs", p.Name)
	}
	return start(p.opts, p.ports)
}

func start(o Options, ports [3]int) (*Process, error) {
	client, scheme, err := apiClient(o.TLS)
	if err != nil {
		return nil, err
	}
	p := &Process{
		Name:       o.Name,
		LogPath:    filepath.Join(o.Dir, o.Name+".log"),
		APIURL:     fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[0]),
		MetricsURL: fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		ProbeURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2]),
		opts:       o,
		ports:      ports,
		client:     client,
		done:       make(chan struct{}),
	}
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(o.Binary, args(o, ports)...)
	p.cmd.Dir = o.Dir
	p.cmd.SysProcAttr = procAttr()
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", o.Binary, err)
	}
	go func() {
		err := p.cmd.Wait()
		_ = logFile.Close()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// args are the operator's flags: Start's, then o.Args.
func args(o Options, ports [3]int) []string {
	a := []string{
		"--kubeconfig", o.Kubeconfig,
		"--namespace", o.Namespace,
		"--api-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[0]),
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[1]),
		"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[2]),
		"--local-bin-dir", testenv.BinDir(),
		"--local-data-dir", o.DataDir,
		// Members are API-only unless a test's pool asks for nodes (or a
		// test passes --local-default-nodes in Args): the host a test runs
		// on must not decide what it tests.
		"--local-default-nodes=0", "--kubernetes-default-nodes=0",
	}
	if o.TLS != nil {
		a = append(a, "--api-tls-cert-file", o.TLS.CertFile, "--api-tls-key-file", o.TLS.KeyFile, "--api-tls-ca-file", o.TLS.CAFile)
	}
	return append(a, o.Args...)
}

// apiClient is the HTTP client for the API and its URL scheme: one that
// trusts tls's CA when the API serves TLS.
func apiClient(tlsFiles *TLS) (*http.Client, string, error) {
	if tlsFiles == nil {
		return http.DefaultClient, "http", nil
	}
	ca, err := os.ReadFile(tlsFiles.CAFile)
	if err != nil {
		return nil, "", fmt.Errorf("reading the API's CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return nil, "", fmt.Errorf("no PEM certificate in %s", tlsFiles.CAFile)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}, "https", nil
}

// WaitReady waits until GET /readyz on the API port answers 200, failing
// early with the log's tail if the process exits.
func (p *Process) WaitReady(ctx context.Context, within time.Duration) error {
	err := testenv.Poll(ctx, within, func() error {
		if err := p.Alive(); err != nil {
			return err
		}
		code, err := p.GetStatus(ctx, p.APIURL+"/readyz")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("/readyz answers %d", code)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s did not become ready: %w\nlog tail:\n%s", p.Name, err, p.Tail(4000))
	}
	return nil
}

// GetStatus GETs url with a 5 s bound and returns the status code; it
// trusts the API's CA when it serves TLS.
func (p *Process) GetStatus(ctx context.Context, url string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Alive returns an error, with the log's tail, once the process has exited.
func (p *Process) Alive() error {
	select {
	case <-p.done:
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.exitErr == nil {
			return fmt.Errorf("%s exited with status 0; log tail:\n%s", p.Name, p.Tail(4000))
		}
		return fmt.Errorf("%s exited (%w); log tail:\n%s", p.Name, p.exitErr, p.Tail(4000))
	default:
		return nil
	}
}

// Exited is closed once the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.done }

// PID is the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Stop sends SIGTERM and waits up to 20 s, then SIGKILL. It returns an error
// when SIGTERM was not enough; calling it again, or after Kill, is a no-op.
func (p *Process) Stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within 20s of SIGTERM and was killed", p.Name)
	}
}

// Kill sends SIGKILL, as a crash or an OOM kill would, and waits for the
// process to be gone.
func (p *Process) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Freeze stops the process with SIGSTOP (it keeps its sockets and answers
// nothing, like a paused VM); Thaw resumes it.
func (p *Process) Freeze() error { return p.cmd.Process.Signal(syscall.SIGSTOP) }

// Thaw resumes a frozen process with SIGCONT.
func (p *Process) Thaw() error { return p.cmd.Process.Signal(syscall.SIGCONT) }

// Log returns the whole log.
func (p *Process) Log() string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", p.LogPath, err)
	}
	return string(b)
}

// Tail returns the log's last n bytes.
func (p *Process) Tail(n int) string {
	s := p.Log()
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}

// LogContains reports whether the log holds s.
func (p *Process) LogContains(s string) bool { return strings.Contains(p.Log(), s) }

// Command hostcp runs a host control plane (etcd + kube-apiserver, built from
// Go modules) for `make run`: it writes an admin kubeconfig and serves until
// interrupted (SIGINT or SIGTERM), then stops both and removes their data.
// Its etcd data and API server certificates live in --data-dir so that every
// process of a `make run` names the run's state directory on its command
// line. It is developer tooling, not part of kobe.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kunobi-ninja/kobe/internal/version"
)

func main() {
	binDir := flag.String("bin-dir", "bin/controlplane/"+version.Kubernetes, "directory with etcd and kube-apiserver")
	kubeconfig := flag.String("write-kubeconfig", ".kobe/host.kubeconfig", "where to write the admin kubeconfig")
	dataDir := flag.String("data-dir", ".kobe/host", "directory for etcd's data and the API server's certificates; emptied at start and removed at stop")
	flag.Parse()
	if err := run(*binDir, *kubeconfig, *dataDir); err != nil {
		fmt.Fprintln(os.Stderr, "hostcp:", err)
		os.Exit(1)
	}
}

func run(binDir, kubeconfig, dataDir string) error {
	abs, err := filepath.Abs(binDir)
	if err != nil {
		return err
	}
	if dataDir, err = filepath.Abs(dataDir); err != nil {
		return err
	}
	// A fresh host every time: objects of an earlier run must not come back.
	if err := os.RemoveAll(dataDir); err != nil {
		return fmt.Errorf("emptying %s: %w", dataDir, err)
	}
	etcdDir, certDir := filepath.Join(dataDir, "etcd"), filepath.Join(dataDir, "apiserver")
	for _, d := range []string{etcdDir, certDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: abs,
		// envtest's 20 s is too short for a cold kube-apiserver on a busy
		// 2-core machine (make test's packages beside it missed it five
		// times in a row); a stuck start still fails within minutes.
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlane: envtest.ControlPlane{
			Etcd:      &envtest.Etcd{DataDir: etcdDir},
			APIServer: &envtest.APIServer{CertDir: certDir},
		},
	}
	// Catch signals before starting anything, so one that comes during the
	// start still stops what was started.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer func() { _ = os.RemoveAll(dataDir) }()
	if _, err := env.Start(); err != nil {
		_ = env.Stop()
		return fmt.Errorf("starting host control plane: %w", err)
	}
	defer func() { _ = env.Stop() }()
	user, err := env.ControlPlane.AddUser(envtest.User{Name: "kobe-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding admin user: %w", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(kubeconfig), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		return err
	}
	fmt.Printf("host control plane ready: kubeconfig %s\n", kubeconfig)
	<-sig
	return nil
}

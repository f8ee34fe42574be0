// Command hostcp runs a host control plane (etcd + kube-apiserver, built from
// Go modules) for `make run`: it writes an admin kubeconfig and serves until
// interrupted. It is developer tooling, not part of kobe.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kunobi-ninja/kobe/internal/version"
)

func main() {
	binDir := flag.String("bin-dir", "bin/controlplane/"+version.Kubernetes, "directory with etcd and kube-apiserver")
	kubeconfig := flag.String("write-kubeconfig", ".kobe/host.kubeconfig", "where to write the admin kubeconfig")
	flag.Parse()
	if err := run(*binDir, *kubeconfig); err != nil {
		fmt.Fprintln(os.Stderr, "hostcp:", err)
		os.Exit(1)
	}
}

func run(binDir, kubeconfig string) error {
	abs, err := filepath.Abs(binDir)
	if err != nil {
		return err
	}
	env := &envtest.Environment{BinaryAssetsDirectory: abs}
	if _, err := env.Start(); err != nil {
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
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	return nil
}

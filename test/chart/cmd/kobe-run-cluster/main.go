// Command kobe-run-cluster is `make run-cluster`: `make run` on a real node.
// It starts the real-node host cluster (internal/testenv/hostcluster) with
// the images `make image` and `make image-pause` built, installs
// charts/kobe with Helm (sim backend on), creates make run's demo (a token
// AccessPolicy and a pool "dev", here of simulated members), relays
// 127.0.0.1:$KOBE_API_PORT to the chart's Service (HTTPS with the chart's
// self-signed certificate, whose CA it writes next to the host cluster's
// state), and prints the same export lines as make run, with --ca-file. SIGINT or SIGTERM deletes the pools, uninstalls
// the release and tears the host cluster down; a second one skips to the
// teardown. It needs root (docs/run-cluster.md).
package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kunobi-ninja/kobe/internal/testenv/hostcluster"
	"github.com/kunobi-ninja/kobe/test/chart/install"
)

const (
	namespace = "kobe-system"
	release   = "kobe"
	pool      = "dev"
	// tlsSecret holds the chart's self-signed API certificate and its CA.
	tlsSecret = "kobe-api-tls"
)

func main() {
	// The controller-runtime client used here has nothing to log that
	// matters; without a logger it prints a warning and a stack after 30 s.
	ctrllog.SetLogger(logr.Discard())
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "make run-cluster:", err)
		os.Exit(1)
	}
}

// settings are read from the environment that `make run-cluster` sets.
type settings struct {
	pauseTar, pauseImage, operatorTar, repository, tag, port string
	// controlPlaneTars are the kubernetes backend's member images (from
	// CONTROLPLANE_IMAGE_DIR), imported so that a pool naming no backend
	// fills without pulling anything.
	controlPlaneTars []string
	// images are KOBE_RUN_CLUSTER_IMAGES: more archives to import.
	images []string
	// valuesFile is KOBE_RUN_CLUSTER_VALUES: Helm values over install.Values.
	valuesFile string
	// check is KOBE_RUN_CLUSTER_CHECK=1: compare the machine before and after.
	check bool
}

func readSettings() (settings, error) {
	s := settings{
		pauseTar: os.Getenv("HOSTCLUSTER_PAUSE_TAR"), pauseImage: os.Getenv("HOSTCLUSTER_PAUSE_IMAGE"),
		operatorTar: os.Getenv("KOBE_OPERATOR_TAR"), repository: os.Getenv("KOBE_IMAGE_REPOSITORY"),
		tag: os.Getenv("KOBE_IMAGE_TAG"), port: os.Getenv("KOBE_API_PORT"),
	}
	if s.port == "" {
		s.port = "8090"
	}
	dir := os.Getenv("CONTROLPLANE_IMAGE_DIR")
	if s.pauseTar == "" || s.pauseImage == "" || s.operatorTar == "" || s.repository == "" || s.tag == "" || dir == "" {
		return s, errors.New("HOSTCLUSTER_PAUSE_TAR, HOSTCLUSTER_PAUSE_IMAGE, KOBE_OPERATOR_TAR, KOBE_IMAGE_REPOSITORY, KOBE_IMAGE_TAG and CONTROLPLANE_IMAGE_DIR are unset: start it with `make run-cluster`")
	}
	// kube-scheduler runs in members with node pods.
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		tar := filepath.Join(dir, name+".tar")
		if _, err := os.Stat(tar); err != nil {
			return s, fmt.Errorf("%w: run `make run-cluster` (it builds the control-plane images)", err)
		}
		s.controlPlaneTars = append(s.controlPlaneTars, tar)
	}
	for _, tar := range strings.Fields(os.Getenv("KOBE_RUN_CLUSTER_IMAGES")) {
		if _, err := os.Stat(tar); err != nil {
			return s, fmt.Errorf("KOBE_RUN_CLUSTER_IMAGES: %w", err)
		}
		s.images = append(s.images, tar)
	}
	if s.valuesFile = os.Getenv("KOBE_RUN_CLUSTER_VALUES"); s.valuesFile != "" {
		if _, err := os.Stat(s.valuesFile); err != nil {
			return s, fmt.Errorf("KOBE_RUN_CLUSTER_VALUES: %w", err)
		}
	}
	s.check = os.Getenv("KOBE_RUN_CLUSTER_CHECK") == "1"
	return s, nil
}

// values are install.Values with the values file's over them.
func (s settings) values() (map[string]any, error) {
	vals := install.Values(s.repository, s.tag)
	if s.valuesFile == "" {
		return vals, nil
	}
	over, err := common.ReadValuesFile(s.valuesFile)
	if err != nil {
		return nil, fmt.Errorf("KOBE_RUN_CLUSTER_VALUES: %w", err)
	}
	return chartutil.CoalesceTables(over, vals), nil
}

func run() (err error) {
	if os.Geteuid() != 0 {
		return errors.New("it needs root: the real-node host cluster runs kubelet and containerd and changes routes and iptables rules. Run it as root, or use `make run`, which needs no root")
	}
	s, err := readSettings()
	if err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", s.port)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s is in use: set KOBE_API_PORT to a free port", addr)
	}
	_ = l.Close()

	// The first signal cancels ctx (start-up stops, or the wait ends); the
	// second cancels the graceful part of the shutdown.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	ctx, stop := context.WithCancel(context.Background())
	graceful, force := context.WithCancel(context.Background())
	go func() {
		<-sigs
		stop()
		<-sigs
		fmt.Println("interrupted again: tearing the host cluster down now...")
		force()
	}()

	start := time.Now()
	var before hostcluster.Snapshot
	if s.check {
		// What an earlier run left is removed first, so that it is not
		// taken for the machine as it was.
		if err := hostcluster.Teardown(ctx, hostcluster.DefaultDir); err != nil {
			return err
		}
		if before, err = hostcluster.TakeSnapshot(ctx); err != nil {
			return err
		}
	}
	fmt.Printf("starting the real-node host cluster (state in %s; needs root)...\n", hostcluster.DefaultDir)
	images := append([]string{s.pauseTar, s.operatorTar}, s.controlPlaneTars...)
	hc, err := hostcluster.New(ctx, hostcluster.Options{PauseImage: s.pauseImage, Images: append(images, s.images...)})
	if err != nil {
		return err // New tore down what it started
	}
	defer func() {
		t0 := time.Now()
		if serr := hc.Stop(context.Background()); serr != nil {
			err = errors.Join(err, fmt.Errorf("tearing the host cluster down: %w", serr))
			return
		}
		fmt.Printf("host cluster torn down (%v).\n", time.Since(t0).Round(100*time.Millisecond))
		if before == nil {
			return
		}
		after, serr := hostcluster.TakeSnapshot(context.Background())
		if serr != nil {
			err = errors.Join(err, serr)
			return
		}
		if d := before.Diff(after); d != "" {
			err = errors.Join(err, fmt.Errorf("the machine differs from before the start:\n%s", d))
			return
		}
		fmt.Println("the machine is as it was before the start.")
	}()
	caFile := filepath.Join(hc.Dir, "kobe-ca.crt") // removed with the host cluster
	token, err := up(ctx, hc, s, addr, caFile)
	if ctx.Err() != nil {
		fmt.Println("interrupted while starting: tearing down...")
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Printf(`
kobe is running on a real node (helm release %[1]s in namespace %[2]s, 2 replicas, up in %[3]v);
its API answers on https://%[4]s, relayed to the chart's Service, with the chart's
self-signed certificate; its CA (the Secret %[8]s's ca.crt) is in %[9]s.
The demo pool %[5]q has 2 simulated members (sim backend: their kubeconfigs reach no cluster):

  export KUBECONFIG=%[6]s
  kubectl -n %[2]s get pods,clusterpools,clusterinstances

Lease one with the CLI:

  export KOBE_ENDPOINT=https://%[4]s KOBE_TOKEN=%[7]s
  bin/kobe pools --ca-file %[9]s
  bin/kobe lease %[5]s --ttl 30m --ca-file %[9]s
  bin/kobe leases --ca-file %[9]s

A pool that names no backend gets members of the kubernetes backend (etcd, kube-apiserver and
kube-controller-manager pods, their images imported, none pulled) reached through kobe's
/connect/<lease>: create one with spec.backend.kubernetes.images.pullPolicy: Never.

Press Ctrl-C to uninstall kobe and tear the host cluster down.
`, release, namespace, time.Since(start).Round(100*time.Millisecond), addr, pool, hc.Kubeconfig, token, tlsSecret, caFile)
	<-ctx.Done()
	fmt.Println()
	done := make(chan struct{})
	go func() {
		defer close(done)
		down(graceful, hc)
	}()
	select {
	case <-done:
	case <-graceful.Done(): // Helm's uninstall takes no context
	}
	return nil
}

// up installs the chart, writes the CA of its API certificate to caFile,
// creates the demo and relays addr to the Service; it returns the demo
// token.
func up(ctx context.Context, hc *hostcluster.Cluster, s settings, addr, caFile string) (string, error) {
	c, err := install.NewClient(hc.Config)
	if err != nil {
		return "", err
	}
	h, err := install.NewHelm(hc.Kubeconfig, namespace, release)
	if err != nil {
		return "", err
	}
	if err := install.CheckImported(ctx, hc.Containerd, s.repository+":"+s.tag); err != nil {
		return "", err
	}
	vals, err := s.values()
	if err != nil {
		return "", err
	}
	fmt.Printf("helm install %s charts/kobe -n %s (image %s:%s, sim backend)...\n", release, namespace, s.repository, s.tag)
	if err := h.Install(ctx, vals); err != nil {
		return "", err
	}
	ca, err := install.CA(ctx, hc.Client, namespace, tlsSecret)
	if err != nil {
		return "", fmt.Errorf("the API's CA: %w", err)
	}
	if err := os.WriteFile(caFile, ca, 0o644); err != nil {
		return "", err
	}
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	token := base64.RawURLEncoding.EncodeToString(b)
	if err := install.Demo(ctx, c, namespace, pool, token); err != nil {
		return "", err
	}
	if err := install.WaitDemoReady(ctx, c, namespace, pool, time.Minute); err != nil {
		return "", err
	}
	if _, err := install.Forward(ctx, hc.Client, namespace, release, addr); err != nil {
		return "", fmt.Errorf("relaying %s to the Service: %w", addr, err)
	}
	if err := install.WaitAPI(ctx, "https://"+addr, ca, time.Minute); err != nil {
		return "", err
	}
	return token, nil
}

// down ends the leases and deletes the pools and members while the
// operator runs (so that their finalizers are removed), then uninstalls the
// release, as the chart README tells users to; ctx ends it early (a second
// Ctrl-C). The caller tears the host cluster down either way.
func down(ctx context.Context, hc *hostcluster.Cluster) {
	t0 := time.Now()
	fmt.Println("ending the leases, deleting the pools and members, uninstalling kobe (Ctrl-C again to skip to the teardown)...")
	c, err := install.NewClient(hc.Config)
	if err == nil {
		err = install.Clear(ctx, c, namespace, time.Minute)
	}
	if err == nil {
		var h *install.Helm
		if h, err = install.NewHelm(hc.Kubeconfig, namespace, release); err == nil {
			err = h.Uninstall(ctx)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "uninstalling: %v (the teardown removes it anyway)\n", err)
		return
	}
	fmt.Printf("kobe uninstalled (%v).\n", time.Since(t0).Round(100*time.Millisecond))
}

// Command devcert writes a CA and a serving certificate it signed, for
// `make run` to serve kobe's API over TLS (which the connect proxy needs):
// <dir>/ca.crt, <dir>/tls.crt and <dir>/tls.key, valid for 127.0.0.1,
// ::1 and localhost. A fresh pair is made at every start; nothing else
// trusts it.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
)

func main() {
	dir := flag.String("dir", "", "Directory to write ca.crt, tls.crt and tls.key to.")
	flag.Parse()
	if err := run(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "devcert:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	if dir == "" {
		return fmt.Errorf("--dir is required")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ca, err := pki.NewCA("kobe make run CA", 30*24*time.Hour)
	if err != nil {
		return err
	}
	cert, key, err := ca.IssueServing("kobe-api", []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, 29*24*time.Hour)
	if err != nil {
		return err
	}
	for name, b := range map[string][]byte{"ca.crt": ca.CertPEM, "tls.crt": cert, "tls.key": key} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// Command kobe-chart packages charts/kobe for a kobe release and pushes it
// to an OCI registry (`make chart-package`, `make chart-push`;
// docs/releases.md):
//
//	kobe-chart package --chart charts/kobe --version v0.2.0 --out dist [--created UNIX]
//	kobe-chart push --version v0.2.0 --dir dist --to oci://ghcr.io/kunobi-ninja/charts [--plain-http] [--created UNIX]
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/kunobi-ninja/kobe/test/chart/release"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kobe-chart:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: kobe-chart package|push [flags]")
	}
	fs := flag.NewFlagSet("kobe-chart "+args[0], flag.ContinueOnError)
	version := fs.String("version", "", "kobe release version (make's VERSION); the chart's appVersion, and its version without the v")
	created := fs.Int64("created", 0, "the archive's and manifest's time, in Unix seconds (the commit's time)")
	switch args[0] {
	case "package":
		chartDir := fs.String("chart", "charts/kobe", "the chart's directory")
		out := fs.String("out", "dist", "directory for kobe-<version>.tgz")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		path, err := release.Package(release.PackageOptions{ChartDir: *chartDir, Version: *version, OutDir: *out, Created: time.Unix(*created, 0)})
		if err != nil {
			return err
		}
		fmt.Println(path)
		return nil
	case "push":
		dir := fs.String("dir", "dist", "directory holding the archive of make chart-package")
		to := fs.String("to", "", "registry path, oci://REGISTRY/PATH")
		plainHTTP := fs.Bool("plain-http", false, "talk plain HTTP to the registry")
		timeout := fs.Duration("timeout", 2*time.Minute, "bound on each request to the registry")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		archive, err := release.ArchivePath(*dir, *version)
		if err != nil {
			return err
		}
		p, err := release.Push(release.PushOptions{Archive: archive, To: *to, PlainHTTP: *plainHTTP, Created: time.Unix(*created, 0), Timeout: *timeout})
		if err != nil {
			return err
		}
		fmt.Printf("pushed oci://%s\ndigest %s\n", p.Ref, p.ManifestDigest)
		return nil
	default:
		return fmt.Errorf("unknown command %q: want package or push", args[0])
	}
}

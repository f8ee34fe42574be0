// Command kobe-image builds, inspects and pushes the container images kobe
// needs (the operator, the pause image of the real-node test host) without
// Docker: one layer of static files on an empty base, written as an OCI
// image-layout tarball with go-containerregistry.
//
// It lives in its own module so that go-containerregistry stays out of
// kobe's go.mod: `make image` builds it into bin/tools.
//
//	kobe-image build   --out bin/images/x.tar --name REF --file SRC:DEST[:MODE] ... [--entrypoint ...]
//	kobe-image inspect bin/images/x.tar        (JSON: digest, config, layer files)
//	kobe-image push    --image bin/images/x.tar --ref REGISTRY/NAME:TAG
//
// A build is reproducible: the same files, flags and --created give the same
// digest and the same tarball, byte for byte.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kobe-image:", err)
		os.Exit(1)
	}
}

const usage = "usage: kobe-image build|inspect|push [flags] (kobe-image <command> -h)"

func run(args []string) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "build":
		return runBuild(args[1:])
	case "inspect":
		return runInspect(args[1:])
	case "push":
		return runPush(args[1:])
	default:
		return errors.New(usage)
	}
}

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func runBuild(args []string) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	var (
		spec           Spec
		files, labels  listFlag
		links          listFlag
		entrypoint     listFlag
		created, plat  string
		format, output string
	)
	fs.StringVar(&output, "out", "", "the tarball to write (required)")
	fs.StringVar(&format, "format", "oci", "oci (an OCI image layout in a tar) or docker (a docker-archive, as docker save writes)")
	fs.StringVar(&spec.Name, "name", "", "the image's full reference, recorded in the tarball so that ctr images import and docker load name it (required)")
	fs.Var(&files, "file", "SRC:DEST[:MODE]: a file of the layer, MODE in octal (default 0755); repeatable")
	fs.Var(&links, "symlink", "/DEST:TARGET: a symbolic link at DEST to TARGET (e.g. /bin/sh:busybox); repeatable")
	fs.Var(&entrypoint, "entrypoint", "one word of the entrypoint; repeatable")
	fs.StringVar(&spec.User, "user", "65532:65532", "the user the container runs as (uid:gid)")
	fs.Var(&labels, "label", "KEY=VALUE: a config label (e.g. org.opencontainers.image.revision); repeatable")
	fs.StringVar(&plat, "platform", "linux/amd64", "os/arch of the files")
	fs.StringVar(&created, "created", "0", "the creation time in Unix seconds, for the config and the files' mtimes (the commit time keeps builds reproducible)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if output == "" || spec.Name == "" || len(files) == 0 {
		return errors.New("build needs --out, --name and at least one --file")
	}
	for _, f := range files {
		lf, err := parseFile(f)
		if err != nil {
			return err
		}
		spec.Files = append(spec.Files, lf)
	}
	for _, l := range links {
		dest, target, ok := strings.Cut(l, ":")
		if !ok || !strings.HasPrefix(dest, "/") || target == "" {
			return fmt.Errorf("--symlink %q: want /DEST:TARGET", l)
		}
		spec.Files = append(spec.Files, LayerFile{Path: dest, Link: target})
	}
	spec.Entrypoint = entrypoint
	spec.Labels = map[string]string{}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return fmt.Errorf("--label %q: want KEY=VALUE", l)
		}
		spec.Labels[k] = v
	}
	var ok bool
	if spec.OS, spec.Arch, ok = strings.Cut(plat, "/"); !ok {
		return fmt.Errorf("--platform %q: want os/arch", plat)
	}
	secs, err := strconv.ParseInt(created, 10, 64)
	if err != nil {
		return fmt.Errorf("--created %q: %w", created, err)
	}
	spec.Created = time.Unix(secs, 0).UTC()

	img, err := Build(spec)
	if err != nil {
		return err
	}
	switch format {
	case "oci":
		err = WriteOCI(output, spec.Name, img)
	case "docker":
		err = WriteDocker(output, spec.Name, img)
	default:
		return fmt.Errorf("--format %q: want oci or docker", format)
	}
	if err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s %s\n", output, spec.Name, d)
	return nil
}

// parseFile reads SRC:DEST[:MODE].
func parseFile(s string) (LayerFile, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || !strings.HasPrefix(parts[1], "/") {
		return LayerFile{}, fmt.Errorf("--file %q: want SRC:/DEST[:MODE]", s)
	}
	f := LayerFile{Source: parts[0], Path: parts[1], Mode: 0o755}
	if len(parts) == 3 {
		m, err := strconv.ParseUint(parts[2], 8, 32)
		if err != nil {
			return LayerFile{}, fmt.Errorf("--file %q: mode: %w", s, err)
		}
		f.Mode = int64(m)
	}
	return f, nil
}

func runInspect(args []string) error {
	if len(args) != 1 {
		return errors.New("usage: kobe-image inspect TARBALL")
	}
	info, err := Inspect(args[0])
	if err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(info)
}

func runPush(args []string) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	var (
		image, ref string
		insecure   bool
		timeout    time.Duration
	)
	fs.StringVar(&image, "image", "", "the tarball that kobe-image build wrote (required)")
	fs.StringVar(&ref, "ref", "", "where to push it: REGISTRY/NAME:TAG (required)")
	fs.BoolVar(&insecure, "insecure", false, "allow a plain-HTTP registry")
	fs.DurationVar(&timeout, "timeout", 2*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if image == "" || ref == "" {
		return errors.New("push needs --image and --ref")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d, err := Push(ctx, image, ref, insecure)
	if err != nil {
		return err
	}
	fmt.Printf("pushed %s@%s\n", ref, d)
	return nil
}

// Command crdgen prints kobe's CustomResourceDefinitions as one multi-document
// YAML stream, so that installing them needs no source tree:
//
//	crdgen | kubectl apply -f -
//
// The CRDs are the controller-gen output in config/crd/bases, embedded at
// build time; `make generate` refreshes them.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/kunobi-ninja/kobe/config/crd"
	"github.com/kunobi-ninja/kobe/internal/version"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: crdgen\n\nPrints kobe's CustomResourceDefinitions (%s) as one YAML stream:\n\n\tcrdgen | kubectl apply -f -\n", version.Version)
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "crdgen: %v\n", err)
		os.Exit(1)
	}
}

// run writes every CRD to w, each document introduced by "---".
func run(w io.Writer) error {
	manifests, err := crd.Manifests()
	if err != nil {
		return err
	}
	var stream bytes.Buffer
	for _, m := range manifests {
		doc := bytes.TrimPrefix(bytes.TrimLeft(m.YAML, "\n"), []byte("---\n"))
		stream.WriteString("---\n")
		stream.Write(doc)
		if !bytes.HasSuffix(doc, []byte("\n")) {
			stream.WriteByte('\n')
		}
	}
	if _, err := w.Write(stream.Bytes()); err != nil {
		return fmt.Errorf("writing CRDs: %w", err)
	}
	return nil
}

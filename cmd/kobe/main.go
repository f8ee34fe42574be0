// Command kobe is the CLI of kobe: lease warm Kubernetes clusters from a
// kobe operator's HTTP API. All of it lives in internal/cli.
package main

import (
	"os"

	"github.com/kunobi-ninja/kobe/internal/cli"
)

func main() {
	os.Exit(cli.Main())
}

// Command etcd is the stock etcd server, built from Go modules because no
// other download source exists on the machines kobe is developed on.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }

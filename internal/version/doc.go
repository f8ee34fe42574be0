// Package version holds the version of kobe's binaries, set at build time
// (go build -ldflags "-X github.com/kunobi-ninja/kobe/internal/version.Version=v0.1.0"),
// and the versions of the components kobe builds and runs (Kubernetes, etcd),
// generated from the modules under hack/controlplane by `make generate`.
//
// It must not import anything of kobe's, and no other package spells those
// versions: they come from here.
package version

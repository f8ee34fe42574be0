// Package version holds the version of kobe's binaries, set at build time:
//
//	go build -ldflags "-X github.com/kunobi-ninja/kobe/internal/version.Version=v0.1.0" ./cmd/kobe
//
// It must not import anything of kobe's.
package version

// Version is the release version of this build; "dev" for local builds.
var Version = "dev"

package version

// Version is the release version of this build; "dev" for local builds.
var Version = "dev"

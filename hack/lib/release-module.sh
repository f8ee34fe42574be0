# Sourced by hack/build-version.sh and hack/conformance/build-e2e.sh.
#
# release_module VERSION MODULE COMMENT DIR writes DIR/go.mod: module MODULE,
# the Go version of k8s.io/kubernetes VERSION's own go.mod, a require of
# k8s.io/kubernetes at VERSION, and a replace of every staging module the
# release names (replace k8s.io/x => ./staging/src/k8s.io/x) by the
# published k8s.io/x v0.<minor>.<patch>, as hack/controlplane/kubernetes
# does for the default version. The first line is "// COMMENT". Fails when
# the module proxy has no such release.
release_module() {
	local v=$1 module=$2 comment=$3 dir=$4 gomod
	[[ $v =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)$ ]] || { echo "release_module: $v is not a Kubernetes version x.y.z" >&2; return 2; }
	local staging=v0.${BASH_REMATCH[2]}.${BASH_REMATCH[3]}
	gomod=$(go mod download -json "k8s.io/kubernetes@v$v" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
	[ -f "$gomod" ] || { echo "release_module: the module proxy has no k8s.io/kubernetes v$v" >&2; return 1; }
	mkdir -p "$dir"
	{
		echo "// $comment"
		echo "module $module"
		echo
		sed -n 's/^go \(.*\)$/go \1/p' "$gomod" | head -1
		echo
		echo "require k8s.io/kubernetes v$v"
		echo
		echo "replace ("
		sed -n 's#^\s*\(k8s\.io/[a-z0-9-]*\) => \./staging/src/.*$#\t\1 => \1 '"$staging"'#p' "$gomod"
		echo ")"
	} >"$dir/go.mod"
}

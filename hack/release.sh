#!/usr/bin/env bash
# Builds kobe's release archives into DIST_DIR (`make release`,
# docs/releases.md):
#
#   kobe_<VERSION>_<os>_<arch>.tar.gz           the CLI, for every PLATFORMS entry
#   kobe-operator_<VERSION>_linux_<arch>.tar.gz the operator, for OPERATOR_PLATFORMS
#   SHA256SUMS                                  `sha256sum -c SHA256SUMS` verifies them
#
# Each archive holds one file at its root (kobe or kobe-operator, mode 0755,
# owned 0:0). The binaries are static (CGO_ENABLED=0), built with -trimpath
# and no VCS stamp, version-stamped with LDFLAGS as `make build` stamps them.
# Reproducible: the archive entries are timed at SOURCE_DATE_EPOCH (default:
# the commit's time) and gzip stores no name or time, so one commit and one Go
# toolchain give the same bytes.
#
# Environment: VERSION (required), LDFLAGS (default: the version stamp alone),
# DIST_DIR (default dist), PLATFORMS (default linux and darwin, amd64 and
# arm64), OPERATOR_PLATFORMS (default linux/amd64 linux/arm64; empty for none),
# SOURCE_DATE_EPOCH.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

: "${VERSION:?set VERSION, e.g. VERSION=v0.1.0 (make release sets it from git describe)}"
LDFLAGS=${LDFLAGS:-"-X github.com/kunobi-ninja/kobe/internal/version.Version=$VERSION"}
DIST_DIR=${DIST_DIR:-$root/dist}
PLATFORMS=${PLATFORMS-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}
OPERATOR_PLATFORMS=${OPERATOR_PLATFORMS-linux/amd64 linux/arm64}
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}

case $VERSION in
*/* | *' '* | '') echo "release: VERSION $VERSION cannot be part of a file name" >&2; exit 2 ;;
esac
# --sort and --mtime=@N are GNU tar's; BSD tar would need other flags.
tar --version 2>/dev/null | grep -q 'GNU tar' || { echo "release: needs GNU tar (for --sort=name and fixed times)" >&2; exit 2; }

mkdir -p "$DIST_DIR"
stage=$(mktemp -d "${TMPDIR:-/tmp}/kobe-release.XXXXXX")
trap 'rm -rf "$stage"' EXIT
# Only this version's archives are listed in SHA256SUMS; older ones go.
rm -f "$DIST_DIR"/kobe_*.tar.gz "$DIST_DIR"/kobe-operator_*.tar.gz "$DIST_DIR/SHA256SUMS"

# archive NAME OS ARCH: packs $stage/OS_ARCH/NAME into NAME_VERSION_OS_ARCH.tar.gz.
archive() {
	local name=$1 os=$2 arch=$3 dir=$stage/$2_$3
	chmod 0755 "$dir/$name"
	tar --sort=name --format=ustar --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
		-C "$dir" -cf - "$name" | gzip -n -9 >"$DIST_DIR/${name}_${VERSION}_${os}_${arch}.tar.gz"
}

build() { # OS ARCH PACKAGE...
	local os=$1 arch=$2
	shift 2
	echo "release: $os/$arch: $*"
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch GOFLAGS=-buildvcs=false \
		go build -trimpath -ldflags "$LDFLAGS -s -w" -o "$stage/${os}_${arch}/" "$@"
}

for p in $PLATFORMS; do
	os=${p%/*} arch=${p#*/}
	pkgs=(./cmd/kobe)
	[[ " $OPERATOR_PLATFORMS " == *" $p "* ]] && pkgs+=(./cmd/kobe-operator)
	build "$os" "$arch" "${pkgs[@]}"
	for b in "${pkgs[@]}"; do archive "${b#./cmd/}" "$os" "$arch"; done
done
for p in $OPERATOR_PLATFORMS; do
	[[ " $PLATFORMS " == *" $p "* ]] && continue
	os=${p%/*} arch=${p#*/}
	build "$os" "$arch" ./cmd/kobe-operator
	archive kobe-operator "$os" "$arch"
done

(cd "$DIST_DIR" && find . -maxdepth 1 \( -name 'kobe_*.tar.gz' -o -name 'kobe-operator_*.tar.gz' \) -printf '%f\n' |
	LC_ALL=C sort | xargs -r sha256sum >SHA256SUMS)
echo "release: $VERSION in $DIST_DIR:"
cat "$DIST_DIR/SHA256SUMS"

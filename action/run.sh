#!/usr/bin/env bash
# The GitHub Action of this repository (action.yml, docs/releases.md):
# installs the kobe CLI of a release, verified against the release's
# SHA256SUMS, gets the job's OIDC ID token (a new one every
# KOBE_ACTION_TOKEN_REFRESH seconds while kobe runs), and runs the command on
# a leased cluster with `kobe run` (which releases the lease on every exit
# path and passes the command's exit status through), after loading the
# image archives of KOBE_ACTION_LOAD into it with `kobe load`.
#
# Inputs, as action.yml passes them:
#   KOBE_ACTION_POOL        pool to lease from (required)
#   KOBE_ACTION_COMMAND     command, run as sh -c "$KOBE_ACTION_COMMAND" (required)
#   KOBE_ACTION_TTL         lease TTL, e.g. 30m (default: the pool's)
#   KOBE_ACTION_ENDPOINT    kobe API URL (default: $KOBE_ENDPOINT)
#   KOBE_ACTION_AUDIENCE    audience of the OIDC token (default: the endpoint, as
#                           in the AccessPolicy examples of README.md)
#   KOBE_ACTION_VERSION     CLI release: vX.Y.Z, or vX, vX.Y or latest for the
#                           newest such release (default: the action's ref)
#   KOBE_ACTION_REPOSITORY  repository of the releases (default kunobi-ninja/kobe)
#   KOBE_ACTION_TOKEN_REFRESH  seconds between two OIDC tokens while the
#                           command runs (default 60)
#   KOBE_ACTION_LOAD        image archives (docker save, OCI) to load into the
#                           cluster before the command runs, separated by
#                           spaces or newlines (default none)
# From the runner: RUNNER_OS, RUNNER_ARCH, RUNNER_TEMP, GITHUB_SERVER_URL,
# GITHUB_API_URL, GITHUB_PATH, GITHUB_TOKEN (for the release list only),
# ACTIONS_ID_TOKEN_REQUEST_URL and ACTIONS_ID_TOKEN_REQUEST_TOKEN (present
# when the job has `permissions: id-token: write`).
# Needs bash, curl, tar, jq and sha256sum or shasum (GitHub's Linux and macOS
# runners have them).
set -euo pipefail

fail() {
	echo "::error title=kobe::$*" >&2
	exit 1
}

pool=${KOBE_ACTION_POOL:-}
command=${KOBE_ACTION_COMMAND:-}
ttl=${KOBE_ACTION_TTL:-}
heartbeat=${KOBE_ACTION_HEARTBEAT_TIMEOUT:-}
endpoint=${KOBE_ACTION_ENDPOINT:-${KOBE_ENDPOINT:-}}
audience=${KOBE_ACTION_AUDIENCE:-$endpoint}
version=${KOBE_ACTION_VERSION:-}
repo=${KOBE_ACTION_REPOSITORY:-kunobi-ninja/kobe}
server=${GITHUB_SERVER_URL:-https://github.com}
api=${GITHUB_API_URL:-https://api.github.com}
refresh=${KOBE_ACTION_TOKEN_REFRESH:-60}
load=${KOBE_ACTION_LOAD:-}

[ -n "$pool" ] || fail "the pool input is empty: say which kobe pool to lease from"
[ -n "$command" ] || fail "the command input is empty: say what to run on the leased cluster"
[ -n "$endpoint" ] || fail "no kobe endpoint: set the endpoint input (or KOBE_ENDPOINT), e.g. https://kobe.example.com"
[[ $refresh =~ ^[1-9][0-9]*$ ]] || fail "token-refresh '$refresh' is no number of seconds: set it to e.g. 60"
for tool in curl tar jq; do
	command -v "$tool" >/dev/null || fail "$tool is not installed on this runner; the kobe action needs curl, tar and jq"
done
# The archives of the load input, split on spaces and newlines (no globs),
# checked before anything is installed or leased.
archives=()
loads=0
set -f
for archive in $load; do
	[ -f "$archive" ] || fail "the load input names $archive, which is no file here ($PWD): write it in an earlier step, e.g. docker save app:dev -o $archive"
	[ -s "$archive" ] || fail "the load input names $archive, which is empty: write it with docker save IMAGE -o $archive"
	archives+=("$archive")
	loads=$((loads + 1))
done
set +f

case ${RUNNER_OS:-$(uname -s)} in
Linux) os=linux ;;
macOS | Darwin) os=darwin ;;
*) fail "kobe releases are built for Linux and macOS runners, not ${RUNNER_OS:-$(uname -s)}" ;;
esac
case ${RUNNER_ARCH:-$(uname -m)} in
X64 | x86_64 | amd64) arch=amd64 ;;
ARM64 | arm64 | aarch64) arch=arm64 ;;
*) fail "kobe releases are built for X64 and ARM64 runners, not ${RUNNER_ARCH:-$(uname -m)}" ;;
esac

# A release tag as it is; a major or minor line (v1, v1.2) or "latest": the
# newest release of it that is neither a draft nor a pre-release.
resolve_version() {
	local want=$1 prefix list auth=()
	case $want in
	v[0-9]*.[0-9]*.[0-9]*) echo "$want"; return ;;
	latest) prefix=v ;;
	v[0-9] | v[0-9][0-9] | v[0-9]*.[0-9]*) prefix=$want. ;;
	*) fail "version '$want' names no kobe release: set the action's version input to a release such as v0.2.0 (or v0, latest)" ;;
	esac
	# ${a[@]+"${a[@]}"}: an empty array is "unbound" to macOS's bash 3.2 under set -u.
	[ -n "${GITHUB_TOKEN:-}" ] && auth=(-H "Authorization: Bearer $GITHUB_TOKEN")
	list=$(curl -fsSL --retry 3 ${auth[@]+"${auth[@]}"} -H "Accept: application/vnd.github+json" \
		"$api/repos/$repo/releases?per_page=100") ||
		fail "listing the releases of $repo at $api failed; set the version input to a release such as v0.2.0"
	jq -r '.[] | select((.draft or .prerelease) | not) | .tag_name' <<<"$list" |
		awk -v p="$prefix" 'index($0, p) == 1 && /^v[0-9]+\.[0-9]+\.[0-9]+$/' | sort -V | tail -n 1
}

[ -n "$version" ] || fail "no version: set the action's version input to a kobe release such as v0.2.0"
resolved=$(resolve_version "$version") || exit 1
[ -n "$resolved" ] || fail "$repo has no release matching '$version'"
version=$resolved

# Download the archive and SHA256SUMS; install the CLI only if its checksum
# is the one SHA256SUMS lists.
asset=kobe_${version}_${os}_${arch}.tar.gz
dir=${RUNNER_TEMP:-${TMPDIR:-/tmp}}/kobe-$version-$os-$arch
mkdir -p "$dir"
base=$server/$repo/releases/download/$version
echo "kobe: installing $asset from $base"
curl -fsSL --retry 3 -o "$dir/$asset" "$base/$asset" || fail "downloading $base/$asset failed: is $version a release of $repo with a $os/$arch CLI?"
curl -fsSL --retry 3 -o "$dir/SHA256SUMS" "$base/SHA256SUMS" || fail "downloading $base/SHA256SUMS failed"
awk -v f="$asset" '$2 == f || $2 == "*" f' "$dir/SHA256SUMS" >"$dir/$asset.sha256"
[ -s "$dir/$asset.sha256" ] || fail "SHA256SUMS of $version lists no $asset; refusing to install it"
if command -v sha256sum >/dev/null; then
	check=(sha256sum --check --status)
else
	check=(shasum --algorithm 256 --check --status)
fi
(cd "$dir" && "${check[@]}" "$asset.sha256") ||
	fail "checksum mismatch: $asset does not match the SHA256SUMS of $version; refusing to install it"
tar -xzf "$dir/$asset" -C "$dir" kobe
export PATH=$dir:$PATH
[ -n "${GITHUB_PATH:-}" ] && echo "$dir" >>"$GITHUB_PATH" # later steps find kobe too
kobe version

# The job's OIDC ID token, for the audience the kobe AccessPolicy accepts.
[ -n "${ACTIONS_ID_TOKEN_REQUEST_URL:-}" ] && [ -n "${ACTIONS_ID_TOKEN_REQUEST_TOKEN:-}" ] ||
	fail "the job cannot mint an OIDC token: add 'permissions: id-token: write' to the workflow or job"
aud=$(jq -rn --arg a "$audience" '$a | @uri')
sep='&'
[[ $ACTIONS_ID_TOKEN_REQUEST_URL == *\?* ]] || sep='?'

# mint prints a new ID token; its caller masks it in the log (::add-mask::
# on the step's standard output).
mint() {
	local reply token
	reply=$(curl -fsS --retry 3 -H "Authorization: bearer $ACTIONS_ID_TOKEN_REQUEST_TOKEN" \
		"$ACTIONS_ID_TOKEN_REQUEST_URL${sep}audience=$aud") || return 1
	token=$(jq -r '.value // empty' <<<"$reply") || return 1
	[ -n "$token" ] || return 1
	printf '%s\n' "$token"
}

# The token lives in a file that kobe reads again on every request
# (--token-file): GitHub's ID tokens are short-lived, and kobe sends the
# token when it waits, extends and releases, so a background refresher
# replaces the file every $refresh seconds for as long as kobe runs. Each
# new token goes to a temporary file (mktemp: 0600) moved over the old one,
# so kobe never reads half a token.
tokens=$(mktemp -d "${RUNNER_TEMP:-${TMPDIR:-/tmp}}/kobe-token.XXXXXX") || fail "creating a directory for the OIDC token failed"
token_file=$tokens/token
store() {
	local tmp
	tmp=$(mktemp "$tokens/token.XXXXXX") || return 1
	printf '%s\n' "$1" >"$tmp" && mv -f "$tmp" "$token_file" && return 0
	rm -f "$tmp"
	return 1
}
token=$(mint) || { rm -rf "$tokens"; fail "requesting the job's OIDC token (audience $audience) failed"; }
echo "::add-mask::$token"
store "$token" || { rm -rf "$tokens"; fail "writing the OIDC token to $tokens failed"; }

# running: pid is alive and no zombie (exited, its parent not yet told).
running() {
	kill -0 "$1" 2>/dev/null || return 1
	case $(ps -o stat= -p "$1" 2>/dev/null) in Z*) return 1 ;; esac
}

# refresh_tokens runs beside kobe: after `exec`, $$ is kobe's PID. It checks
# every second whether kobe still runs, mints a token every $refresh
# seconds, and removes the token directory once kobe has exited. A failed
# refresh is a warning, tried again at the next tick: kobe keeps the last
# token. It ignores the signals of a cancelled job, which kobe handles: kobe
# still needs fresh tokens to release the lease after the command stops.
refresh_tokens() {
	local pid=$1 next=$((SECONDS + refresh)) token
	trap '' INT TERM HUP
	set +e
	while running "$pid"; do
		sleep 1
		((SECONDS >= next)) || continue
		next=$((SECONDS + refresh))
		running "$pid" || break
		if ! token=$(mint); then
			echo "::warning title=kobe::refreshing the job's OIDC token (audience $audience) failed; kobe keeps the current one, next try in ${refresh}s"
			continue
		fi
		echo "::add-mask::$token"
		if ! store "$token"; then
			echo "::warning title=kobe::writing the refreshed OIDC token to $token_file failed; kobe keeps the current one, next try in ${refresh}s"
		fi
	done
	rm -rf "$tokens"
}
refresh_tokens $$ &

# The command's own kobe calls (kobe extend "$KOBE_LEASE_ID") find the
# endpoint and the refreshed token in the environment; KOBE_TOKEN and
# KOBE_OIDC_TOKEN would win over KOBE_TOKEN_FILE (internal/cli).
unset KOBE_TOKEN KOBE_OIDC_TOKEN token
export KOBE_ENDPOINT=$endpoint KOBE_TOKEN_FILE=$token_file
args=(run "$pool")
[ -n "$ttl" ] && args+=(--ttl "$ttl")
[ -n "$heartbeat" ] && args+=(--heartbeat-timeout "$heartbeat")
run=(sh -c "$command")
shown="sh -c <command>"
if [ "$loads" -gt 0 ]; then
	# Once the lease is Bound, kobe run starts this: the archives are loaded
	# (kobe load, with the environment's endpoint and token file), then the
	# command replaces the shell. A failed load fails the step without
	# running the command.
	run=(sh -c 'cmd=$1
shift
kobe load "$KOBE_LEASE_ID" "$@" || {
	status=$?
	echo "::error title=kobe::loading the images into lease $KOBE_LEASE_ID failed; the command did not run" >&2
	exit "$status"
}
exec sh -c "$cmd"' kobe-load "$command" "${archives[@]}")
	shown="sh -c <kobe load \$KOBE_LEASE_ID ${archives[*]}, then the command>"
fi
echo "kobe: kobe ${args[*]} -- $shown (endpoint $endpoint, OIDC audience $audience, token refreshed every ${refresh}s)"
exec kobe --auth oidc --token-file "$token_file" "${args[@]}" -- "${run[@]}"

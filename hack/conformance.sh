#!/usr/bin/env bash
# make conformance: the upstream Kubernetes conformance specs as the judge of
# kobe's members (docs/conformance.md). For each version it builds e2e.test,
# kubectl, agnhost and ginkgo from the release's Go modules
# (hack/conformance/build-e2e.sh) and the images the specs run
# (hack/conformance/images.sh); then, for each backend, it starts kobe,
# applies a pool of that version, leases its member like a user, runs the
# [Conformance] specs of the areas hack/conformance/report names against it,
# and writes the per-area counts into docs/conformance.md. Root only; it
# leaves no process, bridge or nftables table behind. Not part of CI: it
# compiles a second Kubernetes per version.
#
# Environment:
#   CONFORMANCE_VERSIONS  Kubernetes versions (default: the default version and 1.36.3)
#   CONFORMANCE_BACKENDS  local and/or kubernetes (default: local)
#   CONFORMANCE_FOCUS     ginkgo --focus (default: report focus, the areas' [Conformance] specs)
#   CONFORMANCE_SKIP      ginkgo --skip (default: none)
#   CONFORMANCE_PROCS     ginkgo's parallel processes (default 3)
#   CONFORMANCE_NODES     nodes of each member (default 2)
#   CONFORMANCE_TIMEOUT   ginkgo --timeout of one run (default 3h)
#   CONFORMANCE_PARALLEL  1: the versions' suites at the same time, each on its own member
#                         (default 0: one after the other; a busy machine slows both)
#   KOBE_STATE_DIR, KOBE_API_PORT  make run's (default .kobe-conformance, 8095)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

die() {
	echo "conformance: $*" >&2
	exit 1
}
[ "$(id -u)" = 0 ] || die "needs root (members with real nodes)"

default=$(hack/versions.sh kubernetes)
read -r -a versions <<<"${CONFORMANCE_VERSIONS:-$default 1.36.3}"
read -r -a backends <<<"${CONFORMANCE_BACKENDS:-local}"
procs=${CONFORMANCE_PROCS:-3}
nodes=${CONFORMANCE_NODES:-2}
timeout=${CONFORMANCE_TIMEOUT:-3h}
parallel=${CONFORMANCE_PARALLEL:-0}
doc=$root/docs/conformance.md
results=$root/bin/conformance/results
export KOBE_STATE_DIR=${KOBE_STATE_DIR:-$root/.kobe-conformance}
export KOBE_API_PORT=${KOBE_API_PORT:-8095}
state=$KOBE_STATE_DIR
report=$root/bin/tools/conformance-report
export CGO_ENABLED=0 GOFLAGS=-trimpath

go build -o "$report" ./hack/conformance/report
focus=${CONFORMANCE_FOCUS:-$("$report" focus)}
skip=${CONFORMANCE_SKIP:-}

# Builds, one version after the other (each is a Kubernetes-sized compile).
declare -A preload
for v in "${versions[@]}"; do
	if [ "$v" != "$default" ]; then
		nice -n 10 hack/build-version.sh "$v" >/dev/null
	fi
	nice -n 10 hack/conformance/build-e2e.sh "$v" >/dev/null
	preload[$v]=$(hack/conformance/images.sh "$v" | tr '\n' ' ')
	echo "Kubernetes $v: e2e.test, kubectl and images ready (${preload[$v]})"
done

run_pid=
stop_kobe() {
	[ -n "$run_pid" ] || return 0
	echo "stopping kobe (members are destroyed)..."
	kill -TERM "$run_pid" 2>/dev/null || true
	for _ in $(seq 1 600); do
		kill -0 "$run_pid" 2>/dev/null || break
		sleep 0.2
	done
	kill -0 "$run_pid" 2>/dev/null && kill -KILL "$run_pid" 2>/dev/null
	run_pid=
}

# machine prints what a run could leave on the machine: the local backend's
# per-member nftables tables and links (kobe-m<slot>...). Compared before
# and after, so that what was there before is not taken for a leftover.
machine() {
	nft list tables 2>/dev/null | grep -E 'kobe-m[0-9]' || true
	ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | grep -E '^kobe-m[0-9]' || true
}

# ours prints the processes that name this run's state directory.
ours() {
	local f args
	for f in /proc/[0-9]*/cmdline; do
		mapfile -d '' args 2>/dev/null <"$f" || continue
		[[ " ${args[*]-} " == *"$state/"* ]] && echo "process ${f#/proc/}: ${args[*]:0:3}"
	done
	return 0
}

cleanup() {
	local rc=$? left
	set +e
	stop_kobe
	left=$(
		ours
		# Another operator's members (another make run) make tables and
		# links of their own meanwhile: compare only when none runs.
		if ! pgrep -f -- '--local-data-dir' >/dev/null; then
			comm -13 <(echo "$before") <(machine | sort)
		fi
	)
	if [ -n "$left" ]; then
		echo "conformance: left on the machine after kobe stopped:" >&2
		echo "$left" >&2
		rc=1
	fi
	exit "$rc"
}

if [ -n "$(ours)" ]; then
	die "processes of an earlier run still use $state: $(ours | tr '\n' ' ')"
fi
before=$(machine | sort)
trap cleanup EXIT
trap 'exit 130' INT TERM

start_local() {
	# make run's environment: host control plane, CRDs, the operator with
	# the local backend, a demo token and policy; its demo pool goes. Two
	# tries: on a loaded machine the host's API server can miss its start
	# deadline.
	local try
	runlog=$results/run-$(basename "$state").log
	for try in 1 2; do
		KOBE_RUN_NODES=0 setsid hack/run.sh >"$runlog" 2>&1 </dev/null &
		run_pid=$!
		for _ in $(seq 1 900); do
			grep -q '^kobe is running' "$runlog" 2>/dev/null && break
			kill -0 "$run_pid" 2>/dev/null || break
			sleep 0.5
		done
		grep -q '^kobe is running' "$runlog" && break
		echo "make run did not come up (try $try): $(tail -n 3 "$runlog")" >&2
		stop_kobe
	done
	grep -q '^kobe is running' "$runlog" || die "make run failed twice; see $runlog and $state/hostcp.log"
	export KUBECONFIG=$state/host.kubeconfig KOBE_CONFIG=$state/kobe.yaml
	kubectl delete clusterpool dev --wait=false >/dev/null
}

# pool_yaml BACKEND VERSION: the conformance pool of that backend and version.
pool_yaml() {
	local be=$1 v=$2 name=conformance-$1-${2//./-} img
	cat <<YAML
apiVersion: kobe.kunobi.ninja/v1alpha1
kind: ClusterPool
metadata:
  name: $name
spec:
  # One member, made when the run's lease asks for it: no warm spare
  # competes with the suite for the CPU.
  scaling:
    mode: Reactive
    minReady: 0
    maxClusters: 1
  ttl: 4h
  cluster:
    version: "$v"
    podSecurity: privileged
  backend:
    type: $be
YAML
	case $be in
	local)
		echo "    local:"
		echo "      nodes: $nodes"
		echo "      preloadImages:"
		for img in ${preload[$v]}; do echo "      - $img"; done
		;;
	kubernetes)
		echo "    kubernetes:"
		echo "      nodes: $nodes"
		;;
	esac
}

# conform BACKEND VERSION: lease a member of that version and run the suite.
conform() {
	local be=$1 v=$2 out=$results/$1-$2 bindir=$root/bin/conformance/$2 pool t0 rc=0
	pool=conformance-$be-${v//./-}
	rm -rf "$out"
	mkdir -p "$out"
	pool_yaml "$be" "$v" | kubectl apply -f - >/dev/null
	echo "$be $v: leasing a member of pool $pool..."
	bin/kobe lease "$pool" --ttl 4h --alias "$pool" --wait-timeout 20m --kubeconfig "$out/kubeconfig" >"$out/lease.log" 2>&1 ||
		die "$be $v: no lease: $(tail -n 5 "$out/lease.log")"
	"$bindir/kubectl" --kubeconfig "$out/kubeconfig" version >"$out/version.txt" 2>&1 || true
	"$bindir/kubectl" --kubeconfig "$out/kubeconfig" get nodes -o wide >"$out/nodes.txt" 2>&1 || true
	echo "$be $v: running the suite ($procs processes; log: ${out#"$root"/}/e2e.log)..."
	t0=$SECONDS
	# From $out: the ginkgo CLI compares its version with a go.mod in its
	# working directory, and kobe's is not the suite's.
	(cd "$out" && "$bindir/ginkgo" --procs="$procs" --focus="$focus" ${skip:+--skip="$skip"} --timeout="$timeout" --no-color \
		--json-report=report.json --junit-report=junit.xml --output-dir="$out" \
		"$bindir/e2e.test" -- --kubeconfig="$out/kubeconfig" --provider=skeleton --kubectl-path="$bindir/kubectl" \
		--report-dir="$out") >"$out/e2e.log" 2>&1 || rc=$?
	echo "$be $v: suite ended with $rc after $(((SECONDS - t0) / 60)) min"
	if [ -s "$out/report.json" ]; then
		flock "$results/.doc.lock" "$report" record --doc "$doc" --backend "$be" --version "$v" --report "$out/report.json" \
			--minutes "$(((SECONDS - t0) / 60))" --nodes "$nodes" --procs "$procs" \
			${CONFORMANCE_FOCUS:+--note "Focus narrowed by CONFORMANCE_FOCUS to: $CONFORMANCE_FOCUS."}
	else
		echo "$be $v: no JSON report; e2e.log ends with:" >&2
		tail -n 30 "$out/e2e.log" >&2
	fi
	bin/kobe release "$pool" >/dev/null 2>&1 || true
	kubectl delete clusterpool "$pool" --wait=false >/dev/null || true
}

# What the kubernetes backend's run still needs: its members run node pods of
# the node image (make image-node), which would have to preload these images
# (NODE_PRELOAD), and control-plane and node images of each version; the
# repository builds them for the default version only.
kubernetes_reason="hack/conformance.sh drives the local backend only so far: a kubernetes-backend run needs make run-cluster with a node image that preloads the e2e images (make image-node NODE_PRELOAD=...) and, for a version besides the default, control-plane and node images of that version, which the repository does not build yet"

mkdir -p "$results"
for be in "${backends[@]}"; do
	case $be in
	local) start_local ;;
	kubernetes)
		for v in "${versions[@]}"; do
			"$report" not-run --doc "$doc" --backend kubernetes --version "$v" \
				--reason "$kubernetes_reason"
		done
		continue
		;;
	*) die "unknown backend $be (local, kubernetes)" ;;
	esac
	if ((parallel)); then
		pids=()
		for v in "${versions[@]}"; do
			conform "$be" "$v" &
			pids+=($!)
		done
		for p in "${pids[@]}"; do wait "$p" || true; done
	else
		for v in "${versions[@]}"; do conform "$be" "$v"; done
	fi
	stop_kobe
done
echo "docs/conformance.md written"

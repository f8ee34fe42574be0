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
# local: make run (hack/run.sh), members with backend.local.nodes real nodes
# preloading the images. kubernetes: make run-cluster (the real-node host
# cluster, kobe installed with its chart), once per version: the version's
# control-plane images and a node image of its kubelet preloading the
# images (make image-controlplane image-node IMAGE_K8S_VERSION=<v>
# NODE_PRELOAD=...) are imported into the host node, the operator names the
# archives (--kubernetes-node-preload, one list per node image), and the
# suite reaches the member through kobe's /connect proxy.
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
#   KOBE_STATE_DIR, KOBE_API_PORT  make run's (default .kobe-conformance, 8095);
#                         KOBE_API_PORT is make run-cluster's too
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
image_dir=${IMAGE_DIR:-$root/bin/images}
# Where the chart puts members (the release's namespace) and where make run does.
pool_ns=default
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
# stop_kobe ends make run or make run-cluster with SIGTERM, as Ctrl-C would
# (make passes it on to run-cluster's program, which uninstalls kobe and
# tears the host cluster down), and keeps its exit status in run_rc.
run_rc=0 run_checks=0
stop_kobe() {
	[ -n "$run_pid" ] || return 0
	echo "stopping kobe (members are destroyed)..."
	kill -TERM "$run_pid" 2>/dev/null || true
	for _ in $(seq 1 900); do
		kill -0 "$run_pid" 2>/dev/null || break
		sleep 0.2
	done
	kill -0 "$run_pid" 2>/dev/null && kill -KILL "$run_pid" 2>/dev/null
	run_rc=0
	wait "$run_pid" 2>/dev/null || run_rc=$?
	run_pid=
	if ((run_checks)); then
		# make dies of the SIGTERM it passed on (143) whatever its program
		# ended with: the program's verdict is its last line.
		if tail -n 1 "$runlog" | grep -qx 'the machine is as it was before the start.'; then
			run_rc=0
		elif ((run_rc == 0)); then
			run_rc=1
		fi
	fi
}

# machine prints what a run could leave on the machine: the local backend's
# per-member nftables tables and links (kobe-m<slot>...). Compared before
# and after, so that what was there before is not taken for a leftover.
machine() {
	nft list tables 2>/dev/null | grep -E 'kobe-m[0-9]' || true
	ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | grep -E '^kobe-m[0-9]' || true
}

# ours prints the processes that name this run's state directory or the
# real-node host cluster's (make run-cluster's).
hostcluster=/var/tmp/kobe-hostcluster
ours() {
	local f args
	for f in /proc/[0-9]*/cmdline; do
		mapfile -d '' args 2>/dev/null <"$f" || continue
		[[ " ${args[*]-} " == *"$state/"* || " ${args[*]-} " == *"$hostcluster/"* ]] && echo "process ${f#/proc/}: ${args[*]:0:3}"
	done
	return 0
}

cleanup() {
	local rc=$? left
	set +e
	stop_kobe
	left=$(
		ours
		# run-cluster compares the machine after its teardown with before
		# its start (KOBE_RUN_CLUSTER_CHECK) and fails naming what differs.
		((run_rc == 0 || ! run_checks)) || echo "make run-cluster ended with status $run_rc (see ${runlog:-its log})"
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
	pool_ns=default run_checks=0
	kubectl delete clusterpool dev --wait=false >/dev/null
}

# The kubernetes backend's images of VERSION: its control-plane images and a
# node image of its kubelet holding the preloaded archives, under a name of
# its own (make image-node's kobe.local/kobe-node:v1 stays as it is).
node_image() { echo "kobe.local/kobe-node:conformance-$1"; }
node_tar() { echo "$root/bin/conformance/images/$1/kobe-node.tar"; }
k8s_images() {
	local v=$1 a pre=()
	for a in ${preload[$v]}; do pre+=("$image_dir/$a"); done
	echo "kubernetes $v: building its control-plane images and a node image preloading ${#pre[@]} archives..."
	nice -n 10 make --no-print-directory image-controlplane image-node IMAGE_K8S_VERSION="$v" \
		NODE_IMAGE="$(node_image "$v")" NODE_IMAGE_TAR="$(node_tar "$v")" NODE_PRELOAD="${pre[*]}" \
		>"$results/images-$v.log" 2>&1 || die "kubernetes $v: the images failed; see $results/images-$v.log"
}

# start_kubernetes VERSION: make run-cluster with VERSION's images imported
# and an operator whose node pods import the preloaded archives.
start_kubernetes() {
	local v=$1 values=$results/values-$1.yaml a list="" imgs i ca endpoint token
	for a in ${preload[$v]}; do list+="${list:+,}/usr/local/share/kobe-node/images/$a"; done
	printf 'extraArgs:\n- --kubernetes-node-preload=%s\n' "$list" >"$values"
	imgs=$(node_tar "$v")
	if [ "$v" != "$default" ]; then
		for i in kube-apiserver kube-controller-manager kube-scheduler; do imgs+=" $image_dir/$v/$i.tar"; done
	fi
	runlog=$results/run-cluster-$v.log
	echo "kubernetes $v: make run-cluster (log: ${runlog#"$root"/})..."
	run_checks=1
	KOBE_RUN_CLUSTER_IMAGES=$imgs KOBE_RUN_CLUSTER_VALUES=$values KOBE_RUN_CLUSTER_CHECK=1 \
		setsid make --no-print-directory run-cluster >"$runlog" 2>&1 </dev/null &
	run_pid=$!
	# It builds what is out of date first (the operator image at least).
	for _ in $(seq 1 3600); do
		grep -q '^Press Ctrl-C' "$runlog" 2>/dev/null && break
		kill -0 "$run_pid" 2>/dev/null || break
		sleep 0.5
	done
	grep -q '^Press Ctrl-C' "$runlog" || die "make run-cluster did not come up: $(tail -n 5 "$runlog")"
	# Its export lines, as a user would copy them.
	export KUBECONFIG
	KUBECONFIG=$(sed -n 's/^ *export KUBECONFIG=//p' "$runlog" | head -1)
	endpoint=$(sed -n 's/^ *export KOBE_ENDPOINT=\([^ ]*\) .*/\1/p' "$runlog" | head -1)
	token=$(sed -n 's/^ *export KOBE_ENDPOINT=.* KOBE_TOKEN=\([^ ]*\)$/\1/p' "$runlog" | head -1)
	ca=$(sed -n 's/^ *bin\/kobe pools --ca-file //p' "$runlog" | head -1)
	[ -n "$KUBECONFIG" ] && [ -n "$endpoint" ] && [ -n "$token" ] && [ -n "$ca" ] ||
		die "make run-cluster printed no export lines: $(tail -n 20 "$runlog")"
	export KOBE_CONFIG=$results/kobe-run-cluster.yaml
	rm -f "$KOBE_CONFIG"
	bin/kobe config set conformance --endpoint "$endpoint" --ca-file "$ca" --token "$token" >/dev/null
	pool_ns=kobe-system
	kubectl -n "$pool_ns" delete clusterpool dev --wait=false >/dev/null
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
		# Every image named and imported into the host node, none pulled.
		cat <<YAML
    kubernetes:
      nodes: $nodes
      images:
        etcd: registry.k8s.io/etcd:$(hack/versions.sh etcd)-0
        apiServer: registry.k8s.io/kube-apiserver:v$v
        controllerManager: registry.k8s.io/kube-controller-manager:v$v
        node: $(node_image "$v")
        pullPolicy: Never
YAML
		;;
	esac
}

# conform BACKEND VERSION: lease a member of that version and run the suite.
conform() {
	local be=$1 v=$2 out=$results/$1-$2 bindir=$root/bin/conformance/$2 pool t0 rc=0
	pool=conformance-$be-${v//./-}
	rm -rf "$out"
	mkdir -p "$out"
	pool_yaml "$be" "$v" | kubectl -n "$pool_ns" apply -f - >/dev/null
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
	kubectl -n "$pool_ns" delete clusterpool "$pool" --wait=false >/dev/null || true
	# Until its member is destroyed: make run-cluster's teardown should not
	# have to remove node pods that are still running (see docs/conformance.md).
	for _ in $(seq 1 180); do
		kubectl -n "$pool_ns" get clusterinstances -o name 2>/dev/null | grep -q "/pool-$pool-" || break
		sleep 1
	done
}

mkdir -p "$results"
for be in "${backends[@]}"; do
	case $be in
	local) start_local ;;
	kubernetes)
		# One make run-cluster per version: the operator's preload list is
		# that of one node image.
		for v in "${versions[@]}"; do
			k8s_images "$v"
			start_kubernetes "$v"
			conform kubernetes "$v"
			stop_kobe
			((run_rc == 0)) || die "kubernetes $v: make run-cluster ended with status $run_rc: $(tail -n 20 "$runlog")"
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

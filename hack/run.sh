#!/usr/bin/env bash
# make run: a host control plane, kobe's CRDs, the operator with the local
# backend, a demo pool "dev" of size 2 and a demo token, then the commands to
# lease from it. Ctrl-C stops everything (members included) within seconds.
#
# The API is served over TLS (the connect proxy of Proxy-mode pools needs
# it) with a CA and certificate for 127.0.0.1 and localhost made at every
# start (tls/); the CLI finds the CA through the config file kobe.yaml.
#
# Environment: KOBE_RUN_NODES=0 makes the demo pool's members API-only
# (else each gets a node where the operator can run one: root, the node
# binaries and images, which make run builds as root); KOBE_API_PORT
# (default 8090) is the API's port; KOBE_STATE_DIR
# (default .kobe) holds the kubeconfig, logs, the API's TLS files (tls/), the
# CLI's config (kobe.yaml), the host's data (host/) and the members
# (members/). Every process of a run names the state directory on its
# command line: the clean-up finds what is left by the paths of host/ and
# members/.
#
# How Ctrl-C works: the terminal sends SIGINT to its whole foreground process
# group (make and this script). The host control plane and the operator run
# in sessions of their own (setsid), so they do not see it; this script then
# ends the leases and deletes the pools and members while the operator still
# runs, stops the operator, destroys the members it left (bin/membersweep:
# their processes by cgroup, then cgroups, network, mounts), and stops the
# host. Every wait is bounded; a second Ctrl-C (or SIGTERM, as make
# forwards a group's) skips the graceful part: the operator is killed at
# once and the members it left are destroyed the same way. A later run
# destroys what an earlier one left.
set -euo pipefail
cd "$(dirname "$0")/.."
state=${KOBE_STATE_DIR:-.kobe}
mkdir -p "$state"
state=$(cd "$state" && pwd)
export KUBECONFIG=$state/host.kubeconfig
api_port=${KOBE_API_PORT:-8090}
members=$state/members
host_data=$state/host
rel=${state#"$PWD"/}
tls=$state/tls
kobe_config=$state/kobe.yaml

hostcp_pid=
operator_pid=
waiting=
stopping=0
forced=0

# naming S prints the pids of live processes, this script's aside, whose
# command line contains S (read with builtins only, so the scan never finds
# itself).
naming() {
	local f pid args
	for f in /proc/[0-9]*/cmdline; do
		pid=${f#/proc/}
		pid=${pid%/cmdline}
		[[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
		mapfile -d '' args 2>/dev/null <"$f" || continue
		if [[ " ${args[*]-} " == *"$1"* ]]; then echo "$pid"; fi
	done
	return 0
}

# kill_naming S: SIGTERM every process naming S, SIGKILL after 5 s.
kill_naming() {
	local pids i
	mapfile -t pids < <(naming "$1")
	((${#pids[@]})) || return 0
	kill -TERM "${pids[@]}" 2>/dev/null || true
	for ((i = 0; i < 25; i++)); do
		mapfile -t pids < <(naming "$1")
		((${#pids[@]})) || return 0
		((forced)) && break
		sleep 0.2
	done
	kill -KILL "${pids[@]}" 2>/dev/null || true
}

# stop_session PID SECONDS: SIGTERM the process group a setsid'd child leads,
# SIGKILL it after SECONDS (at once after a second Ctrl-C).
stop_session() {
	local pid=$1 secs=$2 i
	[ -n "$pid" ] || return 0
	kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < secs * 5; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		((forced)) && break
		sleep 0.2
	done
	kill -KILL -- "-$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

# bounded SECONDS CMD...: runs CMD for at most SECONDS, in the background so
# that a second Ctrl-C is handled at once (on_signal ends it).
bounded() {
	local secs=$1
	shift
	((forced)) && return 0
	timeout "$secs" "$@" >/dev/null 2>&1 &
	waiting=$!
	wait "$waiting" 2>/dev/null || true
	waiting=
}

# shutdown stops everything this run started; it runs once, on Ctrl-C, on
# SIGTERM, or when the script ends for any other reason.
shutdown() {
	local t0=$SECONDS left
	set +e # clean up as much as possible whatever fails
	if [ -n "$operator_pid" ] && kill -0 "$operator_pid" 2>/dev/null && [ -s "$KUBECONFIG" ]; then
		echo "ending leases and destroying every member (Ctrl-C again to kill them at once)..."
		bounded 10 kubectl delete clusterleases --all --wait=false
		bounded 10 kubectl delete clusterpools --all --wait=false
		bounded 10 kubectl delete clusterinstances --all --wait=false
		bounded 45 kubectl wait --for=delete clusterinstances --all --timeout=45s
	fi
	stop_session "$operator_pid" 10
	# Members outlive the operator by design: destroy any it did not (also
	# after a second Ctrl-C, which kills the operator first).
	sweep_members
	rm -rf "$members"
	stop_session "$hostcp_pid" 15
	kill_naming "$host_data/"
	rm -rf "$host_data" "$KUBECONFIG" "$tls" "$kobe_config"
	echo "kobe stopped ($((SECONDS - t0)) s)."
}

# sweep_members destroys every member left under members/ as the operator
# would (their cgroups hold every process, node containers included; then
# cgroups, network, fence, mounts and file system), then kills whatever
# still names members/.
sweep_members() {
	local left
	# Builtins only for the test, and the sweep in a session of its own: a
	# stop signal sent to the whole process group (a CI cancellation sends
	# several) kills a command substitution's subshell, which would make
	# the test false and skip the sweep, and would kill the sweep midway,
	# leaving members' mounts behind.
	if [ -x bin/membersweep ] && compgen -G "$members/*" >/dev/null; then
		echo "destroying the members that are left..."
		setsid --wait timeout 60 bin/membersweep --data-dir "$members" >/dev/null 2>>"$state/membersweep.log" || true
	fi
	left=$(naming "$members/" | wc -l)
	if ((left > 0)); then
		echo "killing $left member processes that are left..."
		kill_naming "$members/"
	fi
}

on_signal() {
	if ((stopping)); then
		forced=1
		echo "interrupted again: killing every process of $rel now..."
		[ -z "$waiting" ] || kill "$waiting" 2>/dev/null || true
		return
	fi
	stopping=1
	echo
	shutdown
	exit 0
}

on_exit() {
	local rc=$?
	((stopping)) && return
	stopping=1 # from now on, Ctrl-C forces (on_signal)
	shutdown
	exit "$rc"
}
trap on_signal INT TERM
trap on_exit EXIT

# api_answers: the operator's API answers 200 on /readyz, over TLS
# verified with the run's CA.
api_answers() {
	curl -fsS --max-time 2 --cacert "$tls/ca.crt" -o /dev/null "https://127.0.0.1:$api_port/readyz"
}

go build -o bin/membersweep ./hack/membersweep
if old=$({ naming "$host_data"; naming "--local-data-dir $members "; } | sort -u | tr '\n' ' ') && [ -n "$old" ]; then
	stopping=1 # a run that still runs: not ours, leave it alone
	echo "processes of an earlier run still use $rel: $old" >&2
	echo "stop them (kill $old) or choose another KOBE_STATE_DIR" >&2
	exit 1
fi
if (exec 3<>"/dev/tcp/127.0.0.1/$api_port") 2>/dev/null; then
	stopping=1 # nothing started yet
	echo "port $api_port is in use: set KOBE_API_PORT to a free port" >&2
	exit 1
fi
# What an earlier run left (its host and operator are gone): members whose
# processes, cgroups, network and mounts a forced stop did not remove.
sweep_members
rm -rf "$members" "$KUBECONFIG"
command -v curl >/dev/null || {
	stopping=1
	echo "make run needs curl (to check that the API answers over TLS)" >&2
	exit 1
}
go build -o bin/devcert ./hack/devcert
bin/devcert --dir "$tls"

go build -o bin/hostcp ./hack/hostcp
# Run the binary itself (not `go run`) so that stopping it stops the control
# plane, and in a session of its own so the terminal's Ctrl-C reaches only
# this script.
setsid bin/hostcp --bin-dir "$CONTROLPLANE_DIR" --write-kubeconfig "$KUBECONFIG" --data-dir "$host_data" \
	>"$state/hostcp.log" 2>&1 </dev/null &
hostcp_pid=$!
echo "starting the host control plane (log: $rel/hostcp.log)..."
for _ in $(seq 1 900); do
	[ -s "$KUBECONFIG" ] && break
	kill -0 "$hostcp_pid" 2>/dev/null || break
	sleep 0.2
done
[ -s "$KUBECONFIG" ] || {
	echo "host control plane did not start; $rel/hostcp.log ends with:" >&2
	tail -n 20 "$state/hostcp.log" >&2
	exit 1
}

bin/crdgen | kubectl apply -f - >/dev/null
kubectl wait --for condition=established --timeout=60s crd --all >/dev/null

token=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')
kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Secret
metadata:
  name: kobe-demo-token
stringData:
  token: "$token"
---
apiVersion: kobe.kunobi.ninja/v1alpha1
kind: AccessPolicy
metadata:
  name: demo
spec:
  auth:
    token:
      secretRef:
        name: kobe-demo-token
  identity: demo
  rules:
    - pools: ["*"]
      maxTtl: 4h
      maxConcurrentLeases: 5
---
apiVersion: kobe.kunobi.ninja/v1alpha1
kind: ClusterPool
metadata:
  name: dev
spec:
  size: 2
  ttl: 30m
  backend:
    type: local
  healthCheck:
    intervalSeconds: 10
    failureThreshold: 3
YAML

# The CLI's config: the endpoint, the API's CA and the demo token.
(
	umask 077
	cat >"$kobe_config" <<YAML
current-context: make-run
contexts:
  - name: make-run
    endpoint: https://127.0.0.1:$api_port
    ca-file: $tls/ca.crt
    token: "$token"
YAML
)

setsid bin/kobe-operator --namespace default --api-bind-address "127.0.0.1:$api_port" \
	--api-tls-cert-file "$tls/tls.crt" --api-tls-key-file "$tls/tls.key" --api-tls-ca-file "$tls/ca.crt" \
	--metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0 \
	--local-bin-dir "$CONTROLPLANE_DIR" --local-data-dir "$members" \
	--local-default-nodes "$([ "${KOBE_RUN_NODES:-}" = 0 ] && echo 0 || echo auto)" >"$state/operator.log" 2>&1 </dev/null &
operator_pid=$!
echo "starting the operator (log: $rel/operator.log)..."
ready=0
for _ in $(seq 1 300); do
	if api_answers 2>/dev/null; then
		ready=1
		break
	fi
	kill -0 "$operator_pid" 2>/dev/null || break
	sleep 0.2
done
if ((!ready)); then
	echo "the operator's API did not answer on 127.0.0.1:$api_port within 60 s; $rel/operator.log ends with:" >&2
	tail -n 30 "$state/operator.log" >&2
	exit 1
fi

# Whether the demo pool's members get a node (pods run) or are API-only,
# and why: the pool's Nodes condition (the operator decides: root, the node
# binaries and images; make run builds them when run as root).
nodes_status=""
for _ in $(seq 1 50); do
	nodes_status=$(kubectl get clusterpool dev -o jsonpath='{.status.conditions[?(@.type=="Nodes")].status}' 2>/dev/null || true)
	[ -n "$nodes_status" ] && break
	sleep 0.2
done
nodes_message=$(kubectl get clusterpool dev -o jsonpath='{.status.conditions[?(@.type=="Nodes")].message}' 2>/dev/null || true)
if [ "$nodes_status" = True ]; then
	demo_members="2 real clusters with a node each: pods run (each ~20 s to Ready)"
else
	demo_members="2 API-only clusters (each ~15 s to Ready): ${nodes_message:-the pool has not said whether its members get a node}"
fi

cat <<EOF

kobe is running; its API answers on https://127.0.0.1:$api_port (CA: $rel/tls/ca.crt; operator log: $rel/operator.log).
The demo pool "dev" is filling with $demo_members.

  export KUBECONFIG=$KUBECONFIG
  kubectl get clusterpools,clusterinstances

Lease one with the CLI:

  export KOBE_CONFIG=$kobe_config KOBE_ENDPOINT=https://127.0.0.1:$api_port KOBE_TOKEN=$token
  bin/kobe pools
  bin/kobe lease dev --ttl 30m --kubeconfig /tmp/dev.kubeconfig
  kubectl --kubeconfig /tmp/dev.kubeconfig get nodes
  bin/kobe run dev -- kubectl get ns

Press Ctrl-C to stop kobe and destroy every member.
EOF
# wait returns when a trapped signal arrives (on_signal then runs) or when
# the operator exits by itself.
wait "$operator_pid" || true
if ! ((stopping)); then
	echo "the operator exited; $rel/operator.log ends with:" >&2
	tail -n 30 "$state/operator.log" >&2
	exit 1
fi

#!/usr/bin/env bash
# make run: a host control plane, kobe's CRDs, the operator with the local
# backend, a demo pool "dev" of size 2 and a demo token, then the commands to
# lease from it. Ctrl-C stops everything (members included).
set -euo pipefail
cd "$(dirname "$0")/.."
state=.kobe
mkdir -p "$state"
export KUBECONFIG=$PWD/$state/host.kubeconfig
api_port=${KOBE_API_PORT:-8090}
pids=()
cleanup() {
	for ((i=${#pids[@]}-1; i>=0; i--)); do kill "${pids[$i]}" 2>/dev/null || true; wait "${pids[$i]}" 2>/dev/null || true; done
}
trap cleanup EXIT INT TERM

rm -f "$KUBECONFIG"
go build -o bin/hostcp ./hack/hostcp
# Run the binary itself (not `go run`) so that stopping it stops the control plane.
bin/hostcp --bin-dir "$CONTROLPLANE_DIR" --write-kubeconfig "$KUBECONFIG" > "$state/hostcp.log" 2>&1 &
pids+=($!)
echo "starting the host control plane (log: $state/hostcp.log)..."
for _ in $(seq 1 180); do
	[ -s "$KUBECONFIG" ] && break
	kill -0 "${pids[0]}" 2>/dev/null || break
	sleep 1
done
[ -s "$KUBECONFIG" ] || { echo "host control plane did not start; see $state/hostcp.log" >&2; exit 1; }

bin/crdgen | kubectl apply -f - >/dev/null
kubectl wait --for condition=established --timeout=60s crd --all >/dev/null

token=$(head -c 24 /dev/urandom | base64 | tr -d '/+=' )
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

bin/kobe-operator --namespace default --api-bind-address "127.0.0.1:$api_port" \
	--metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0 \
	--local-bin-dir "$CONTROLPLANE_DIR" --local-data-dir "$PWD/$state/members" > "$state/operator.log" 2>&1 &
pids+=($!)

cat <<EOF

kobe is running (operator log: $state/operator.log).
The demo pool "dev" is filling with 2 real clusters (each ~15 s to Ready):

  export KUBECONFIG=$KUBECONFIG
  kubectl get clusterpools,clusterinstances

Lease one with the CLI:

  export KOBE_ENDPOINT=http://127.0.0.1:$api_port KOBE_TOKEN=$token
  bin/kobe pools
  bin/kobe lease dev --ttl 30m --kubeconfig /tmp/dev.kubeconfig
  kubectl --kubeconfig /tmp/dev.kubeconfig get ns
  bin/kobe run dev -- kubectl get ns

Press Ctrl-C to stop kobe and destroy every member.
EOF
# Stopping the operator does not stop members (they survive restarts by
# design), so Ctrl-C deletes the pool first and waits for its members to go.
stop() {
	trap - EXIT INT TERM
	echo "ending leases and destroying every member..."
	kubectl delete clusterleases --all --wait=false >/dev/null 2>&1 || true
	kubectl delete clusterpools --all --wait=true --timeout=120s >/dev/null 2>&1 || true
	kubectl delete clusterinstances --all --wait=true --timeout=120s >/dev/null 2>&1 || true
	cleanup
	exit 0
}
trap stop INT TERM
wait "${pids[1]}"

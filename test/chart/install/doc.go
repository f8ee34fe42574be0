// Package install installs charts/kobe on the real-node host cluster
// (internal/testenv/hostcluster) with Helm as a library, and its test proves
// the chart end to end: helm install of the image `make image` built, a
// lease through the chart's Service with the real CLI, helm upgrade without
// losing it, helm uninstall leaving what the chart README documents.
//
// make run-cluster (test/chart/cmd/kobe-run-cluster) uses the same pieces;
// nothing here is used by the operator itself.
package install

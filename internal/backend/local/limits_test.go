package local

import (
	"testing"

	"github.com/kunobi-ninja/kobe/internal/node"
)

func TestNodeShareKeepsAReserveForTheControlPlane(t *testing.T) {
	for _, tc := range []struct {
		name      string
		member    node.CgroupLimits
		wantNodes node.CgroupLimits
	}{
		{"defaults: 512 tasks and 512 MiB kept", node.CgroupLimits{MemoryBytes: 2 << 30, Pids: 4096}, node.CgroupLimits{MemoryBytes: 1536 << 20, Pids: 3584}},
		{"small: a quarter kept", node.CgroupLimits{MemoryBytes: 1 << 30, Pids: 1024}, node.CgroupLimits{MemoryBytes: 768 << 20, Pids: 768}},
		{"the CRD's minimums", node.CgroupLimits{MemoryBytes: 256 << 20, Pids: 256}, node.CgroupLimits{MemoryBytes: 192 << 20, Pids: 192}},
		{"no memory limit stays none", node.CgroupLimits{Pids: 2048}, node.CgroupLimits{Pids: 1536}},
		{"no process limit stays none", node.CgroupLimits{MemoryBytes: 8 << 30}, node.CgroupLimits{MemoryBytes: 8<<30 - 512<<20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nodeShare(tc.member); got != tc.wantNodes {
				t.Fatalf("nodeShare(%+v) = %+v, want %+v", tc.member, got, tc.wantNodes)
			}
		})
	}
}

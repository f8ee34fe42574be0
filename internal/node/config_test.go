package node

import "testing"

func TestPodsShareKeepsAReserveForTheDaemons(t *testing.T) {
	for _, tc := range []struct {
		name       string
		node, pods CgroupLimits
	}{
		{"large: 256 tasks and 256 MiB kept", CgroupLimits{MemoryBytes: 1536 << 20, Pids: 3584}, CgroupLimits{MemoryBytes: 1280 << 20, Pids: 3328}},
		{"small: a quarter kept", CgroupLimits{MemoryBytes: 512 << 20, Pids: 192}, CgroupLimits{MemoryBytes: 384 << 20, Pids: 144}},
		{"none stays none", CgroupLimits{}, CgroupLimits{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PodsShare(tc.node); got != tc.pods {
				t.Fatalf("PodsShare(%+v) = %+v, want %+v", tc.node, got, tc.pods)
			}
		})
	}
}

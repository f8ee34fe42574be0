package local

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestKeepLogs: a failed member's logs outlive it, cut to their tails, and
// only the last keptFailedMembers members' are kept.
func TestKeepLogs(t *testing.T) {
	root := filepath.Join(t.TempDir(), "members")
	b := &Backend{opts: Options{DataRoot: root}}
	write := func(path string, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var kept []string
	for i := range keptFailedMembers + 2 {
		p := paths{dir: filepath.Join(root, "ns_pool-a-"+strconv.Itoa(i)+"_0b7b6f8e-0c8d-4a57-9c43-4d7a5c3f2a1"+strconv.Itoa(i))}
		write(filepath.Join(p.dir, "logs", "kube-apiserver.log"), "started\n")
		write(filepath.Join(p.dir, "nodes", "0", "logs", "kubelet.log"), strings.Repeat("x", keptLogTail)+"kubelet exited\n")
		write(filepath.Join(p.dir, "etcd", "member.db"), "not a log")
		if err := b.keepLogs(p); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, b.keptLogs(p))
		// Directories' times are what pruning orders by.
		at := time.Now().Add(-time.Duration(100-i) * time.Second)
		if err := os.Chtimes(b.keptLogs(p), at, at); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.HasPrefix(kept[0], root+"-failed/") {
		t.Errorf("logs kept in %s, not beside the data root", kept[0])
	}
	last := kept[len(kept)-1]
	kubelet, err := os.ReadFile(filepath.Join(last, "nodes", "0", "logs", "kubelet.log"))
	if err != nil || len(kubelet) != keptLogTail || !strings.HasSuffix(string(kubelet), "kubelet exited\n") {
		t.Errorf("kubelet's log kept: %d bytes (%v), want its last %d", len(kubelet), err, keptLogTail)
	}
	if _, err := os.Stat(filepath.Join(last, "etcd", "member.db")); err == nil {
		t.Error("a file that is no log was kept")
	}
	entries, err := os.ReadDir(filepath.Dir(last))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != keptFailedMembers {
		t.Errorf("%d failed members' logs kept, want %d", len(entries), keptFailedMembers)
	}
}

// TestForgetPool: a deleted pool's kept logs go, and no other pool's, nor
// a pool's of the same name in another namespace.
func TestForgetPool(t *testing.T) {
	root := filepath.Join(t.TempDir(), "members")
	b := &Backend{opts: Options{DataRoot: root}}
	if err := b.ForgetPool("ns", func(string) bool { return true }); err != nil {
		t.Fatalf("ForgetPool with nothing kept: %v", err)
	}
	names := []string{"ns_pool-a-0_u1", "ns_pool-a-12_u2", "ns_pool-a-b-0_u3", "other_pool-a-0_u4", "ns_pool-c-0_u5"}
	for _, n := range names {
		if err := os.MkdirAll(filepath.Join(root+"-failed", n, "logs"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	isA := func(name string) bool { return name == "pool-a-0" || name == "pool-a-12" }
	if err := b.ForgetPool("ns", isA); err != nil {
		t.Fatal(err)
	}
	var left []string
	entries, err := os.ReadDir(root + "-failed")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := []string{"ns_pool-a-b-0_u3", "ns_pool-c-0_u5", "other_pool-a-0_u4"}; strings.Join(left, " ") != strings.Join(want, " ") {
		t.Errorf("kept logs left: %v, want %v", left, want)
	}
}

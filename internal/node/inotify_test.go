package node

import (
	"os"
	"path/filepath"
	"testing"
)

func TestInotifyFloors(t *testing.T) {
	for _, tc := range []struct {
		name               string
		memTotal           int64
		instances, watches int64
	}{
		{"24 GiB", 24 << 30, 24 << 30 / 512, 24 << 30 / 64},
		{"2 GiB", 2 << 30, 4 << 20, 32 << 20},
		{"beyond what an int holds", 1 << 40, 1<<31 - 1, 1<<31 - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := inotifyFloors(tc.memTotal)
			if got["fs/inotify/max_user_instances"] != tc.instances || got["fs/inotify/max_user_watches"] != tc.watches {
				t.Fatalf("inotifyFloors(%d) = %v, want instances %d, watches %d", tc.memTotal, got, tc.instances, tc.watches)
			}
		})
	}
}

func TestReadMemTotal(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, body string
		want       int64
		wantErr    bool
	}{
		{"meminfo", "MemTotal:       24613072 kB\nMemFree:        1000 kB\n", 24613072 << 10, false},
		{"no MemTotal", "MemFree:        1000 kB\n", 0, true},
		{"not a number", "MemTotal:       lots kB\n", 0, true},
		{"another unit", "MemTotal:       24 GB\n", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "meminfo")
			if err := os.WriteFile(path, []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := readMemTotal(path)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("readMemTotal = %d, %v; want %d, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

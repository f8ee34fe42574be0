package local_test

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/backend/local"
	"github.com/kunobi-ninja/kobe/internal/testenv/flagtest"
)

func TestFlagDefaults(t *testing.T) {
	f := flagtest.Parse[local.Flags](t)
	if f.Disable {
		t.Error("disabled by default")
	}
	if err := f.Validate(); err != nil {
		t.Fatalf("the defaults are refused: %v", err)
	}
	got := f.Options(logr.Discard())
	got.Logger = logr.Logger{}
	want := local.Options{
		BinDir: local.DefaultBinDir, DataRoot: filepath.Join(os.TempDir(), "kobe-local"), AdvertiseHost: "127.0.0.1",
		ProvisionTimeout: 3 * time.Minute, NodeBinDir: local.DefaultNodeBinDir, ImageDir: local.DefaultImageDir,
		PauseImage: local.DefaultPauseImage, MaxMembers: 16, MemberNice: local.DefaultMemberNice,
		MemberDiskLimit: 20 << 30, MinFreeDisk: local.DiskFloor{Percent: 5}, DefaultNodes: backend.NodesDefault{Auto: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("options\n%+v\nwant\n%+v", got, want)
	}
}

func TestFlagsToOptions(t *testing.T) {
	f := flagtest.Parse[local.Flags](t, "--disable-local-backend", "--local-data-dir=/d", "--local-node-agent=/bin/kobe-node",
		"--local-member-disk-limit=1Gi", "--local-min-free-disk=2Gi", "--local-max-members=0", "--local-default-nodes=0", "--local-member-nice=0")
	if !f.Disable {
		t.Error("--disable-local-backend not set")
	}
	o := f.Options(logr.Discard())
	if o.DataRoot != "/d" || o.NodeAgent != "/bin/kobe-node" || o.MemberDiskLimit != 1<<30 ||
		o.MinFreeDisk != (local.DiskFloor{Bytes: 2 << 30}) || o.MaxMembers != 0 || o.DefaultNodes != (backend.NodesDefault{}) || o.MemberNice != 0 {
		t.Errorf("options %+v", o)
	}
}

func TestFlagRefusals(t *testing.T) {
	cases := []struct {
		flag string
		// refused is the refusal; empty: accepted.
		refused string
	}{
		{"--local-max-members=0", ""},
		{"--local-max-members=" + strconv.Itoa(math.MaxInt32), ""},
		{"--local-max-members=-1", "--local-max-members must be 0 (no cap) or a positive number"},
		{"--local-max-members=" + strconv.Itoa(math.MaxInt32+1), "--local-max-members must be 0 (no cap) or a positive number"},
		{"--local-member-nice=0", ""},
		{"--local-member-nice=19", ""},
		{"--local-member-nice=-1", "--local-member-nice must be from 0 (the operator's priority) to 19 (the lowest), not -1"},
		{"--local-member-nice=20", "--local-member-nice must be from 0 (the operator's priority) to 19 (the lowest), not 20"},
	}
	for _, tc := range cases {
		t.Run(tc.flag, func(t *testing.T) {
			_, err := flagtest.Validate[local.Flags](t, tc.flag)
			flagtest.Refused(t, err, tc.refused)
		})
	}
}

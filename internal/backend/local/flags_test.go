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
		PauseImage: local.DefaultPauseImage, MaxMembers: 16,
		MemberDiskLimit: 20 << 30, MinFreeDisk: local.DiskFloor{Percent: 5}, DefaultNodes: backend.NodesDefault{Auto: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("options\n%+v\nwant\n%+v", got, want)
	}
}

func TestFlagsToOptions(t *testing.T) {
	f := flagtest.Parse[local.Flags](t, "--disable-local-backend", "--local-data-dir=/d", "--local-node-agent=/bin/kobe-node",
		"--local-member-disk-limit=1Gi", "--local-min-free-disk=2Gi", "--local-max-members=0", "--local-default-nodes=0")
	if !f.Disable {
		t.Error("--disable-local-backend not set")
	}
	o := f.Options(logr.Discard())
	if o.DataRoot != "/d" || o.NodeAgent != "/bin/kobe-node" || o.MemberDiskLimit != 1<<30 ||
		o.MinFreeDisk != (local.DiskFloor{Bytes: 2 << 30}) || o.MaxMembers != 0 || o.DefaultNodes != (backend.NodesDefault{}) {
		t.Errorf("options %+v", o)
	}
}

func TestFlagRefusals(t *testing.T) {
	cases := []struct {
		value string
		// refused is the refusal; empty: accepted.
		refused string
	}{
		{"0", ""},
		{strconv.Itoa(math.MaxInt32), ""},
		{"-1", "--local-max-members must be 0 (no cap) or a positive number"},
		{strconv.Itoa(math.MaxInt32 + 1), "--local-max-members must be 0 (no cap) or a positive number"},
	}
	for _, tc := range cases {
		t.Run(tc.value, func(t *testing.T) {
			_, err := flagtest.Validate[local.Flags](t, "--local-max-members="+tc.value)
			flagtest.Refused(t, err, tc.refused)
		})
	}
}

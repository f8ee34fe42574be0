package local_test

import (
	"flag"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/kunobi-ninja/kobe/internal/backend/local"
)

func parseFlags(t *testing.T, args ...string) local.Flags {
	t.Helper()
	var f local.Flags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	f.Bind(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %q: %v", args, err)
	}
	return f
}

func TestFlagDefaults(t *testing.T) {
	f := parseFlags(t)
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
		MemberDiskLimit: 20 << 30, MinFreeDisk: local.DiskFloor{Percent: 5},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("options\n%+v\nwant\n%+v", got, want)
	}
}

func TestFlagsToOptions(t *testing.T) {
	f := parseFlags(t, "--disable-local-backend", "--local-data-dir=/d", "--local-node-agent=/bin/kobe-node",
		"--local-member-disk-limit=1Gi", "--local-min-free-disk=2Gi", "--local-max-members=0")
	if !f.Disable {
		t.Error("--disable-local-backend not set")
	}
	o := f.Options(logr.Discard())
	if o.DataRoot != "/d" || o.NodeAgent != "/bin/kobe-node" || o.MemberDiskLimit != 1<<30 ||
		o.MinFreeDisk != (local.DiskFloor{Bytes: 2 << 30}) || o.MaxMembers != 0 {
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
			err := parseFlags(t, "--local-max-members="+tc.value).Validate()
			switch {
			case tc.refused == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
				t.Fatalf("got %v, want %q", err, tc.refused)
			}
		})
	}
}

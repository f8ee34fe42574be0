package clusterlease_test

import (
	"flag"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/controller/clusterlease"
)

func TestFlagDefaults(t *testing.T) {
	var f clusterlease.Flags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	f.Bind(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if want := (clusterlease.Flags{Retention: time.Hour, AuditRetention: 720 * time.Hour}); f != want {
		t.Errorf("defaults %+v, want %+v", f, want)
	}
	if err := f.Validate(); err != nil {
		t.Fatalf("the defaults are refused: %v", err)
	}
	if err := fs.Parse([]string{"--lease-retention=0s", "--audit-retention=48h"}); err != nil {
		t.Fatal(err)
	}
	if want := (clusterlease.Flags{AuditRetention: 48 * time.Hour}); f != want {
		t.Errorf("parsed %+v, want %+v", f, want)
	}
	if err := f.Validate(); err != nil {
		t.Fatalf("refused: %v", err)
	}
}

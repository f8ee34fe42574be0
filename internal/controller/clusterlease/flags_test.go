package clusterlease_test

import (
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/controller/clusterlease"
	"github.com/kunobi-ninja/kobe/internal/testenv/flagtest"
)

func TestFlagDefaults(t *testing.T) {
	f, err := flagtest.Validate[clusterlease.Flags](t)
	if want := (clusterlease.Flags{Retention: time.Hour, AuditRetention: 720 * time.Hour}); f != want {
		t.Errorf("defaults %+v, want %+v", f, want)
	}
	flagtest.Refused(t, err, "")
	f, err = flagtest.Validate[clusterlease.Flags](t, "--lease-retention=0s", "--audit-retention=48h")
	if want := (clusterlease.Flags{AuditRetention: 48 * time.Hour}); f != want {
		t.Errorf("parsed %+v, want %+v", f, want)
	}
	flagtest.Refused(t, err, "")
}

package wire

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDecodeCreateLease(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       CreateLease
		wantErr    string
	}{
		{name: "pool and ttl", body: `{"pool":"ci-small","ttl":"30m"}`, want: CreateLease{Pool: "ci-small", TTL: 30 * time.Minute}},
		{name: "profile is a synonym", body: `{"profile":"ci","alias":"run-1"}`, want: CreateLease{Pool: "ci", Alias: "run-1"}},
		{name: "same pool and profile", body: `{"pool":"ci","profile":"ci"}`, want: CreateLease{Pool: "ci"}},
		{name: "pool and profile differ", body: `{"pool":"a","profile":"b"}`, wantErr: "pool and profile are synonyms"},
		{name: "unknown field", body: `{"pool":"ci","tll":"5m"}`, wantErr: `unknown field "tll"`},
		{name: "negative ttl", body: `{"pool":"ci","ttl":"-5m"}`, wantErr: "greater than zero"},
		{name: "sub-second ttl", body: `{"pool":"ci","ttl":"1ns"}`, wantErr: "at least 1s"},
		{name: "not a duration", body: `{"pool":"ci","ttl":"soon"}`, wantErr: "is not a duration"},
		{name: "empty", body: ` `, wantErr: "the body is empty"},
		{name: "trailing data", body: `{"pool":"ci"} {}`, wantErr: "data after the JSON object"},
		{name: "array", body: `[]`, wantErr: "not valid JSON for this route"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeCreateLease([]byte(tc.body))
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, ErrMalformed) || !contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an ErrMalformed saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestDecodeExtendLease(t *testing.T) {
	if d, err := DecodeExtendLease([]byte(`{}`)); err != nil || d != 0 {
		t.Errorf("empty extension: got %s, %v; want 0 (the lease's own TTL)", d, err)
	}
	if d, err := DecodeExtendLease([]byte(`{"extend_ttl":"15m"}`)); err != nil || d != 15*time.Minute {
		t.Errorf("15m: got %s, %v", d, err)
	}
	if _, err := DecodeExtendLease([]byte(`{"extend_ttl":"0s"}`)); !errors.Is(err, ErrMalformed) {
		t.Errorf("0s: got %v, want ErrMalformed", err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// FuzzDecodeCreate feeds arbitrary bodies to POST /v1/leases's decoder: it
// never panics, refuses with ErrMalformed or accepts, and a TTL it accepts
// is at least a second. (go test runs the seeds; -fuzz explores further.)
func FuzzDecodeCreate(f *testing.F) {
	for _, seed := range []string{
		`{"pool":"ci-small","ttl":"30m"}`, `{"profile":"ci","alias":"run-1"}`, `{"pool":"a","profile":"b"}`,
		`{"pool":"ci","colour":"red"}`, `{"pool":"ci","ttl":"-5m"}`, `{}`, ``, `[]`, `{"pool":"ci"} {}`, `{"ttl":"1ns","pool":"x"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeCreateLease(body)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("refusal %v does not wrap ErrMalformed", err)
			}
			return
		}
		if req.TTL != 0 && req.TTL < time.Second {
			t.Fatalf("accepted ttl %s", req.TTL)
		}
	})
}

package apiserver

import (
	"bytes"
	"errors"
	"net/http/httptest"
	"testing"
)

// FuzzDecodeCreate feeds arbitrary bodies to POST /v1/leases's decoder: it
// never panics, refuses with errBadRequest or accepts, and a TTL it accepts
// is at least a second. (go test runs the seeds; -fuzz explores further.)
func FuzzDecodeCreate(f *testing.F) {
	for _, seed := range []string{
		`{"pool":"ci-small","ttl":"30m"}`, `{"profile":"ci","alias":"run-1"}`, `{"pool":"a","profile":"b"}`,
		`{"pool":"ci","colour":"red"}`, `{"pool":"ci","ttl":"-5m"}`, `{}`, ``, `[]`, `{"pool":"ci"} {}`, `{"ttl":"1ns","pool":"x"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest("POST", "/v1/leases", bytes.NewReader(body))
		req, err := decodeCreate(r)
		if err != nil {
			if !errors.Is(err, errBadRequest) {
				t.Fatalf("refusal %v does not wrap errBadRequest", err)
			}
			return
		}
		if req.TTL != 0 && req.TTL.Seconds() < 1 {
			t.Fatalf("accepted ttl %s", req.TTL)
		}
	})
}

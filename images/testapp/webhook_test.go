package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestReview(t *testing.T) {
	for _, tc := range []struct {
		name    string
		allowed bool
	}{{"deny-me", false}, {"fine", true}, {"not-deny-", true}} {
		body, _ := json.Marshal(admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request:  &admissionv1.AdmissionRequest{UID: types.UID("u-" + tc.name), Name: tc.name},
		})
		rec := httptest.NewRecorder()
		review(rec, httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body)))
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
			t.Fatalf("%s: %v %s", tc.name, err, rec.Body)
		}
		if string(out.Response.UID) != "u-"+tc.name || out.Response.Allowed != tc.allowed || out.Kind != "AdmissionReview" {
			t.Errorf("%s: response %+v, want uid echoed and allowed=%v", tc.name, out, tc.allowed)
		}
	}
	rec := httptest.NewRecorder()
	review(rec, httptest.NewRequest(http.MethodPost, "/", bytes.NewReader([]byte(`{"kind":"nothing"}`))))
	if rec.Code != http.StatusBadRequest {
		t.Errorf("a body without a request: %d, want 400", rec.Code)
	}
}

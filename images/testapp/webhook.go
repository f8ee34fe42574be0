package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// denyPrefix marks the objects the webhook refuses: a test sees its
// refusal only when the member's API server really called it.
const denyPrefix = "deny-"

// webhook serves a validating admission webhook over HTTPS on :8443 with
// the certificate and key at certFile and keyFile (a Secret the test
// mounts): it refuses objects whose name starts with "deny-" and admits
// all others.
func webhook(certFile, keyFile string) error {
	srv := &http.Server{
		Addr:              ":8443",
		ReadHeaderTimeout: 5 * time.Second,
		Handler:           http.HandlerFunc(review),
	}
	fmt.Println("testapp: admission webhook on :8443")
	return srv.ListenAndServeTLS(certFile, keyFile)
}

func review(w http.ResponseWriter, r *http.Request) {
	var in admissionv1.AdmissionReview
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&in); err != nil || in.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	resp := &admissionv1.AdmissionResponse{UID: in.Request.UID, Allowed: true}
	if strings.HasPrefix(in.Request.Name, denyPrefix) {
		resp.Allowed = false
		resp.Result = &metav1.Status{Message: "denied by testapp's webhook: " + in.Request.Name}
	}
	fmt.Printf("testapp: review of %s %s/%s: allowed %v\n", in.Request.Resource.Resource, in.Request.Namespace, in.Request.Name, resp.Allowed)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(admissionv1.AdmissionReview{TypeMeta: in.TypeMeta, Response: resp})
}

// redirect serves HTTPS on :8443 with the certificate and key at certFile
// and keyFile, answering every request with a 307 to target: what a hostile
// holder's webhook answers to send the member's API server elsewhere.
func redirect(certFile, keyFile, target string) error {
	srv := &http.Server{
		Addr:              ":8443",
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Printf("testapp: redirecting %s %s to %s\n", r.Method, r.URL.Path, target)
			http.Redirect(w, r, target, http.StatusTemporaryRedirect)
		}),
	}
	fmt.Println("testapp: redirecting everything on :8443 to", target)
	return srv.ListenAndServeTLS(certFile, keyFile)
}

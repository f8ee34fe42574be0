// Command echo is the host cluster test's workload: an HTTP server on :8080
// that answers every request with its hostname (the pod's name), built
// static and packed into an image on the machine, so nothing is pulled.
package main

import (
	"fmt"
	"net/http"
	"os"
	"time"
)

func main() {
	name, err := os.Hostname()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := &http.Server{
		Addr:              ":8080",
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintln(w, name)
		}),
	}
	fmt.Println("echo: serving on :8080 as", name)
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

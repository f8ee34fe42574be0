package main

import (
	"io"
	"log"
	"net/http"
	"time"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
)

// registry serves an in-memory image registry (the OCI distribution API,
// go-containerregistry's pkg/registry) over plain HTTP on ADDR until
// killed: the "remote" registry of the image-pull tests, which run it in a
// network namespace of their own. What is pushed is lost when it stops.
func registry(addr string) error {
	srv := &http.Server{
		Addr:              addr,
		Handler:           ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))),
		ReadHeaderTimeout: 10 * time.Second,
	}
	return srv.ListenAndServe()
}

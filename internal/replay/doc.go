// Package replay remembers one-time values (the nonces of SSH-signed API
// requests) as objects in the API server, so that every replica of the
// operator refuses a value that any of them has seen, and deletes those
// objects once they expire. It knows nothing of HTTP or of signatures.
package replay

// Package memberproc reads, from /proc and from a local-backend member's
// data directory, which processes of a member run, so tests can check that
// members start and leave nothing behind. It must only be imported from
// tests, and only reads (Kill is for a test's own clean-up).
package memberproc

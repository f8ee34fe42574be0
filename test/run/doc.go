// Package run tests `make run` the way a person uses it: typed in a
// terminal, waited on until the demo pool is ready, stopped with Ctrl-C.
// It holds only that end-to-end test, and no helper that other tests share
// (those live in internal/testenv).
package run

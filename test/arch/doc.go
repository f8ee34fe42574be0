// Package arch holds tests of kobe's architecture: which layers may import
// which. It has no code of its own; the rules live in imports_test.go.
package arch

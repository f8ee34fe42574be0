// Package truncate bounds text that lands in a status field with a length
// limit in the CRD (the API server would refuse the whole write otherwise),
// or in a log line from a caller who need not be known (who would otherwise
// choose how much the operator writes). It imports nothing of kobe.
package truncate

import (
	"strconv"
	"strings"
)

// UTF8 cuts s to at most n bytes of valid UTF-8: a rune cut in two, or any
// invalid byte, is dropped rather than sent to the API server.
func UTF8(s string, n int) string {
	return strings.ToValidUTF8(s[:min(len(s), max(n, 0))], "")
}

// Log cuts s for a log line: s itself when it has at most n bytes, else its
// first n bytes (UTF8) followed by a note of its whole length, so that a
// reader sees that it was cut and by how much: "abc...(cut: 1048576 bytes)".
// The result is at most n+32 bytes.
func Log(s string, n int) string {
	if len(s) <= max(n, 0) {
		return s
	}
	return UTF8(s, n) + "...(cut: " + strconv.Itoa(len(s)) + " bytes)"
}

// Package truncate bounds text that lands in a status field with a length
// limit in the CRD: the API server would refuse the whole write otherwise.
// It imports nothing of kobe.
package truncate

import "strings"

// UTF8 cuts s to at most n bytes of valid UTF-8: a rune cut in two, or any
// invalid byte, is dropped rather than sent to the API server.
func UTF8(s string, n int) string {
	return strings.ToValidUTF8(s[:min(len(s), max(n, 0))], "")
}

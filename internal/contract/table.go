package contract

import (
	"fmt"
	"net/http"
	"strings"
)

// Markdown renders Cases as a Markdown table (route, condition, status,
// reason) for the README.
func Markdown() string {
	var b strings.Builder
	b.WriteString("| route | condition | status | reason |\n|---|---|---|---|\n")
	for _, c := range Cases() {
		reason := c.Reason
		if reason == "" {
			reason = string(c.Shape)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %d %s | %s |\n", c.Route, c.Condition, c.Status, http.StatusText(c.Status), reason)
	}
	return b.String()
}

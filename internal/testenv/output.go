package testenv

import (
	"bytes"
	"sync"
)

// Output collects what a process writes (its stdout and stderr, or a
// pseudo-terminal) while the test reads it: safe for both at once.
type Output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

// String is everything written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

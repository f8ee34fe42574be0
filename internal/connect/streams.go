package connect

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// stream is one proxied request of a lease: its context's cancel and, once
// upgraded, the caller's hijacked connection. Closing it ends both, so a
// watch and an exec or port-forward session end alike.
type stream struct {
	lease, member types.UID
	cancel        context.CancelFunc
	timer         clock.Timer
	// in and out count the bytes from and to the caller.
	in, out atomic.Int64

	mu   sync.Mutex
	conn net.Conn
	// admitted: counted against the lease's cap (see streams.admit).
	admitted bool
	closed   bool
	// code is the status sent to the caller, 0 once hijacked.
	code int
}

// close ends the stream; it may run more than once, from any goroutine.
func (s *stream) close() {
	s.mu.Lock()
	s.closed = true
	c := s.conn
	s.mu.Unlock()
	s.cancel()
	if c != nil {
		_ = c.Close()
	}
}

// hijacked records the caller's connection, or closes it at once when the
// stream has already been closed.
func (s *stream) hijacked(c net.Conn) {
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.conn = c
	}
	s.mu.Unlock()
	if closed {
		_ = c.Close()
	}
}

// status is the status code sent to the caller and whether the
// connection was hijacked (an upgrade, whose status went raw).
func (s *stream) status() (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.code, s.conn != nil
}

func (s *stream) wroteHeader(code int) {
	s.mu.Lock()
	if s.code == 0 {
		s.code = code
	}
	s.mu.Unlock()
}

// streams are the open streams of this replica, by lease UID.
type streams struct {
	mu      sync.Mutex
	byLease map[types.UID]map[*stream]struct{}
}

func (ss *streams) add(s *stream) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.byLease == nil {
		ss.byLease = map[types.UID]map[*stream]struct{}{}
	}
	if ss.byLease[s.lease] == nil {
		ss.byLease[s.lease] = map[*stream]struct{}{}
	}
	ss.byLease[s.lease][s] = struct{}{}
}

// admit counts s, tracked, against its lease's cap of max streams; false
// when the lease already has max.
func (ss *streams) admit(s *stream, max int) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	n := 0
	for o := range ss.byLease[s.lease] {
		o.mu.Lock()
		if o.admitted {
			n++
		}
		o.mu.Unlock()
	}
	if n >= max {
		return false
	}
	s.mu.Lock()
	s.admitted = true
	s.mu.Unlock()
	return true
}

func (ss *streams) remove(s *stream) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.byLease[s.lease], s)
	if len(ss.byLease[s.lease]) == 0 {
		delete(ss.byLease, s.lease)
	}
}

// closeLease closes every stream of lease uid and returns how many.
func (ss *streams) closeLease(uid types.UID) int {
	return ss.closeWhere(func(s *stream) bool { return s.lease == uid })
}

// closeMember closes every stream to member uid and returns how many.
func (ss *streams) closeMember(uid types.UID) int {
	return ss.closeWhere(func(s *stream) bool { return s.member == uid })
}

func (ss *streams) closeWhere(match func(*stream) bool) int {
	ss.mu.Lock()
	var doomed []*stream
	for _, set := range ss.byLease {
		for s := range set {
			if match(s) {
				doomed = append(doomed, s)
			}
		}
	}
	ss.mu.Unlock()
	for _, s := range doomed {
		s.close()
	}
	return len(doomed)
}

// has reports whether lease uid has open streams.
func (ss *streams) has(uid types.UID) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.byLease[uid]) > 0
}

// count is the number of open streams (for tests and metrics).
func (ss *streams) count() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	n := 0
	for _, set := range ss.byLease {
		n += len(set)
	}
	return n
}

// trackingWriter hands the stream the connection that an upgrade hijacks
// and counts what the caller is sent.
type trackingWriter struct {
	http.ResponseWriter
	s *stream
}

func (w *trackingWriter) WriteHeader(code int) {
	w.s.wroteHeader(code)
	w.ResponseWriter.WriteHeader(code)
}

func (w *trackingWriter) Write(b []byte) (int, error) {
	w.s.wroteHeader(http.StatusOK)
	n, err := w.ResponseWriter.Write(b)
	w.s.out.Add(int64(n))
	return n, err
}

// Hijack is the underlying writer's, recording the connection, which
// counts the bytes both ways.
func (w *trackingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.s.hijacked(c)
	return &countingConn{Conn: c, s: w.s}, rw, nil
}

// countingConn counts an upgraded connection's bytes into its stream.
type countingConn struct {
	net.Conn
	s *stream
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.s.in.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.s.out.Add(int64(n))
	return n, err
}

// countingBody counts a request body's bytes.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// Flush is the underlying writer's (watches are flushed per event).
func (w *trackingWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *trackingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

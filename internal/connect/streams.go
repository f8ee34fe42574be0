package connect

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"sync"

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

	mu     sync.Mutex
	conn   net.Conn
	closed bool
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

// trackingWriter hands the stream the connection that an upgrade hijacks.
type trackingWriter struct {
	http.ResponseWriter
	s *stream
}

// Hijack is the underlying writer's, recording the connection.
func (w *trackingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.s.hijacked(c)
	return c, rw, nil
}

// Flush is the underlying writer's (watches are flushed per event).
func (w *trackingWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *trackingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

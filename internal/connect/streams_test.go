package connect

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestStreamsClose: closing a lease's streams cancels their requests and
// closes their hijacked connections, leaves other leases' open, and a
// connection hijacked after its stream was closed is closed at once.
func TestStreamsClose(t *testing.T) {
	var ss streams
	newStream := func(lease, member types.UID) (*stream, context.Context, net.Conn) {
		ctx, cancel := context.WithCancel(t.Context())
		s := &stream{lease: lease, member: member, cancel: cancel}
		ss.add(s)
		ours, theirs := net.Pipe()
		t.Cleanup(func() { _ = theirs.Close() })
		return s, ctx, ours
	}
	closed := func(c net.Conn) bool {
		_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		_, err := c.Write([]byte("x"))
		return err != nil && !isTimeout(err)
	}

	a1, ctxA1, connA1 := newStream("lease-a", "member-a")
	a1.hijacked(connA1)
	_, ctxA2, _ := newStream("lease-a", "member-a")
	b, ctxB, connB := newStream("lease-b", "member-b")
	b.hijacked(connB)

	if n := ss.closeLease("lease-a"); n != 2 {
		t.Fatalf("closed %d streams of lease-a, want 2", n)
	}
	if ctxA1.Err() == nil || ctxA2.Err() == nil || !closed(connA1) {
		t.Fatal("lease-a's streams are not ended")
	}
	if ctxB.Err() != nil || closed(connB) {
		t.Fatal("lease-b's stream was ended with lease-a's")
	}

	// Hijacked after the close: closed at once.
	late, _, lateConn := newStream("lease-c", "member-c")
	late.close()
	late.hijacked(lateConn)
	if !closed(lateConn) {
		t.Fatal("a connection hijacked after its stream closed is still open")
	}

	if n := ss.closeMember("member-b"); n != 1 || ctxB.Err() == nil || !closed(connB) {
		t.Fatalf("closing member-b's streams: %d closed", n)
	}
	for _, s := range []*stream{a1, b, late} {
		ss.remove(s)
	}
	if ss.has("lease-b") {
		t.Fatal("a removed stream is still tracked")
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

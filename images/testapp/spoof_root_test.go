//go:build root

package main

import (
	"net"
	"strings"
	"testing"
	"time"
)

// TestSpoofLoopback sends through the kernel: datagrams claiming
// 127.0.0.7 reach a listener on 127.0.0.1, from 127.0.0.7, with the
// marker and claimed source as payload. It needs CAP_NET_RAW: the root layer (make test-node) runs it.
func TestSpoofLoopback(t *testing.T) {
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if err := spoof("127.0.0.7,127.0.0.8", conn.LocalAddr().String()); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	buf := make([]byte, 2048)
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	for range 2 * spoofCount {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		claimed, ok := strings.CutPrefix(string(buf[:n]), spoofMarker)
		if !ok || claimed != from.(*net.UDPAddr).IP.String() {
			t.Errorf("datagram %q from %v", buf[:n], from)
		}
		got[claimed]++
	}
	if got["127.0.0.7"] != spoofCount || got["127.0.0.8"] != spoofCount {
		t.Errorf("datagrams per claimed source: %v, want %d each", got, spoofCount)
	}
}

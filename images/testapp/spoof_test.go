package main

import (
	"encoding/binary"
	"net"
	"testing"
)

// TestChecksumRFC1071 is the worked example of RFC 1071 (section 3):
// the words 0001 f203 f4f5 f6f7 sum to ddf2, whose complement is 220d.
func TestChecksumRFC1071(t *testing.T) {
	if got := checksum(0, []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}); got != 0x220d {
		t.Errorf("checksum = %#04x, want 0x220d", got)
	}
	// An odd length is padded with a zero byte.
	if got, want := checksum(0, []byte{0x01}), checksum(0, []byte{0x01, 0x00}); got != want {
		t.Errorf("odd length: %#04x, want %#04x", got, want)
	}
}

// TestUDPPacket checks the fields of the packet spoof writes and that
// both checksums verify (a sum over the checksummed bytes, the checksum
// included, complements to zero).
func TestUDPPacket(t *testing.T) {
	src, dst := net.IPv4(10, 1, 2, 3), net.IPv4(192, 0, 2, 2)
	payload := []byte("kobe-spoof 10.1.2.3") // odd length: the padded case
	pkt := udpPacket(src, dst, 40001, 4789, 7, payload)
	if len(pkt) != 20+8+len(payload) {
		t.Fatalf("length %d", len(pkt))
	}
	ip, udp := pkt[:20], pkt[20:]
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"version and IHL", ip[0], byte(0x45)},
		{"total length", binary.BigEndian.Uint16(ip[2:]), uint16(len(pkt))},
		{"id", binary.BigEndian.Uint16(ip[4:]), uint16(7)},
		{"flags", binary.BigEndian.Uint16(ip[6:]), uint16(0x4000)},
		{"ttl", ip[8], byte(64)},
		{"protocol", ip[9], byte(17)},
		{"source", net.IP(ip[12:16]).String(), "10.1.2.3"},
		{"destination", net.IP(ip[16:20]).String(), "192.0.2.2"},
		{"source port", binary.BigEndian.Uint16(udp[0:]), uint16(40001)},
		{"destination port", binary.BigEndian.Uint16(udp[2:]), uint16(4789)},
		{"UDP length", binary.BigEndian.Uint16(udp[4:]), uint16(8 + len(payload))},
		{"payload", string(udp[8:]), string(payload)},
		{"IP header checksum verifies", checksum(0, ip), uint16(0)},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
	pseudo := append(append(append([]byte{}, ip[12:20]...), 0, 17), byte(len(udp)>>8), byte(len(udp)))
	if c := checksum(sum(0, pseudo), udp); c != 0 {
		t.Errorf("UDP checksum does not verify: %#04x left", c)
	}
	if binary.BigEndian.Uint16(udp[6:]) == 0 {
		t.Error("UDP checksum 0 (none)")
	}
}

func TestSpoofUsage(t *testing.T) {
	for _, args := range [][]string{{"spoof", "10.0.0.1"}, {"spoof", "nope", "127.0.0.1:1"}, {"spoof", "10.0.0.1", "127.0.0.1"}, {"spoof", "10.0.0.1", "::1:53"}} {
		if err := run(args); err == nil {
			t.Errorf("testapp %v: no error", args)
		}
	}
}

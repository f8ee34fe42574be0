package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// spoofMarker begins the payload of every datagram spoof sends, followed by
// the source it claims, so that a listener can tell them from other
// traffic and say which forged source got through.
const spoofMarker = "kobe-spoof "

// spoofCount is how many datagrams spoof sends per source.
const spoofCount = 3

// spoof sends spoofCount UDP datagrams to dst (host:port, IPv4) from each
// of the comma-separated IPv4 addresses in srcs, whatever the pod's own
// address is: it writes the IPv4 header itself on a raw socket
// (IPPROTO_RAW, which implies IP_HDRINCL), which needs CAP_NET_RAW (in
// Pod Security baseline's defaults). Sending is all it proves: whether a
// datagram arrives is the receiver's to say.
func spoof(srcs, dst string) error {
	host, port, err := net.SplitHostPort(dst)
	if err != nil {
		return err
	}
	to := net.ParseIP(host).To4()
	p, err := strconv.ParseUint(port, 10, 16)
	if to == nil || err != nil || p == 0 {
		return fmt.Errorf("spoof: %q is not an IPv4 address and port", dst)
	}
	var froms []net.IP
	for s := range strings.SplitSeq(srcs, ",") {
		ip := net.ParseIP(strings.TrimSpace(s)).To4()
		if ip == nil {
			return fmt.Errorf("spoof: source %q is not an IPv4 address", s)
		}
		froms = append(froms, ip)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_RAW)
	if err != nil {
		return fmt.Errorf("spoof: cannot open a raw socket (IPPROTO_RAW needs CAP_NET_RAW): %w", err)
	}
	defer func() { _ = syscall.Close(fd) }()
	sa := &syscall.SockaddrInet4{Addr: [4]byte(to)}
	for i := range spoofCount {
		for _, from := range froms {
			pkt := udpPacket(from, to, 40000+uint16(i), uint16(p), uint16(i+1), []byte(spoofMarker+from.String()))
			if err := syscall.Sendto(fd, pkt, 0, sa); err != nil {
				return fmt.Errorf("spoof: sending from %s to %s: %w", from, dst, err)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Printf("sent %d datagrams to %s from each of %s\n", spoofCount, dst, srcs)
	return nil
}

// udpPacket is an IPv4 packet (no options, TTL 64, don't fragment) of
// one UDP datagram, both checksums filled in.
func udpPacket(src, dst net.IP, srcPort, dstPort, id uint16, payload []byte) []byte {
	const ipLen, udpLen = 20, 8
	pkt := make([]byte, ipLen+udpLen+len(payload))
	ip := pkt[:ipLen]
	ip[0] = 4<<4 | ipLen/4 // version, header length in 32-bit words
	binary.BigEndian.PutUint16(ip[2:], uint16(len(pkt)))
	binary.BigEndian.PutUint16(ip[4:], id)
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF, offset 0
	ip[8] = 64
	ip[9] = syscall.IPPROTO_UDP
	copy(ip[12:16], src.To4())
	copy(ip[16:20], dst.To4())
	binary.BigEndian.PutUint16(ip[10:], checksum(0, ip))

	udp := pkt[ipLen:]
	binary.BigEndian.PutUint16(udp[0:], srcPort)
	binary.BigEndian.PutUint16(udp[2:], dstPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[udpLen:], payload)
	// The pseudo-header: source, destination, zero and protocol, UDP length.
	var pseudo [12]byte
	copy(pseudo[0:4], ip[12:16])
	copy(pseudo[4:8], ip[16:20])
	pseudo[9] = syscall.IPPROTO_UDP
	binary.BigEndian.PutUint16(pseudo[10:], uint16(len(udp)))
	c := checksum(sum(0, pseudo[:]), udp)
	if c == 0 {
		c = 0xffff // 0 means "no checksum" in UDP over IPv4
	}
	binary.BigEndian.PutUint16(udp[6:], c)
	return pkt
}

// sum adds b, as big-endian 16-bit words (an odd last byte padded with
// zero), to the one's-complement running sum s.
func sum(s uint32, b []byte) uint32 {
	for ; len(b) >= 2; b = b[2:] {
		s += uint32(binary.BigEndian.Uint16(b))
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	return s
}

// checksum is the Internet checksum (RFC 1071) of b on top of the running
// sum s.
func checksum(s uint32, b []byte) uint16 {
	s = sum(s, b)
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

var errSpoofUsage = errors.New("usage: testapp spoof SRC[,SRC...] HOST:PORT")

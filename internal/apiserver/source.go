package apiserver

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"

	"github.com/kunobi-ninja/kobe/internal/auth"
)

// maxForwardedHops bounds the X-Forwarded-For entries read, from the right:
// a chain of trusted proxies is a few hops long, and a caller must not make
// the server split a header of thousands.
const maxForwardedHops = 16

// withSource names the caller behind a trusted proxy in the request's
// context (auth.WithSource), so that the per-source limits charge the
// caller rather than the proxy that all callers behind it share. Without
// trusted proxies it does nothing: X-Forwarded-For is never read.
func (s *Server) withSource(next http.Handler) http.Handler {
	if len(s.opts.TrustedProxies) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		addr := clientAddr(r.RemoteAddr, r.Header.Values("X-Forwarded-For"), s.opts.TrustedProxies)
		next.ServeHTTP(w, r.WithContext(auth.WithSource(r.Context(), addr)))
	})
}

// clientAddr is the address of the caller of a request whose connection
// comes from remoteAddr with the X-Forwarded-For header values forwardedFor.
//
// A peer outside trusted is the caller, whatever its header says: anyone can
// send one. A trusted peer is a proxy, and the last entry of the header is
// the one it appended: the address that connected to it. That address is the
// caller unless it is itself a trusted proxy, whose own entry is then read,
// and so on leftwards: the caller is the right-most address that is not a
// trusted proxy. Entries left of it were written by the caller (or by
// proxies nobody vouches for) and are never read, so a spoofed left-most
// entry gains nothing. A malformed entry, or more than maxForwardedHops of
// them, ends the walk at the last trusted proxy read: the request counts as
// that proxy's. The zero Addr means remoteAddr is no IP address and port.
func clientAddr(remoteAddr string, forwardedFor []string, trusted []netip.Prefix) netip.Addr {
	peer, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	addr := peer.Addr().Unmap().WithZone("")
	if !isTrusted(addr, trusted) {
		return addr
	}
	hops := 0
	// Several header lines are one list, in order (RFC 9110 5.3).
	for i := len(forwardedFor) - 1; i >= 0; i-- {
		for list := forwardedFor[i]; list != ""; {
			entry := list
			if j := strings.LastIndexByte(list, ','); j >= 0 {
				entry, list = list[j+1:], list[:j]
			} else {
				list = ""
			}
			if hops++; hops > maxForwardedHops {
				return addr
			}
			next, ok := parseForwarded(strings.TrimSpace(entry))
			if !ok {
				return addr
			}
			if !isTrusted(next, trusted) {
				return next
			}
			addr = next
		}
	}
	return addr
}

// parseForwarded parses one X-Forwarded-For entry: an IPv4 or IPv6
// address, bracketed or not, with a port or not (some proxies append one).
func parseForwarded(entry string) (netip.Addr, bool) {
	addr, err := netip.ParseAddr(entry)
	if err != nil {
		addr, err = parseBracketed(entry)
	}
	if err != nil || addr.IsUnspecified() {
		return netip.Addr{}, false
	}
	return addr.Unmap().WithZone(""), true
}

// parseBracketed parses "[v6]", "[v6]:port" and "v4:port".
func parseBracketed(entry string) (netip.Addr, error) {
	if ap, err := netip.ParseAddrPort(entry); err == nil {
		return ap.Addr(), nil
	}
	inner, ok := strings.CutPrefix(entry, "[")
	if inner, ok2 := strings.CutSuffix(inner, "]"); ok && ok2 {
		if addr, err := netip.ParseAddr(inner); err == nil && addr.Is6() {
			return addr, nil
		}
	}
	return netip.Addr{}, errors.New("not an address")
}

func isTrusted(addr netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

package wire

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Loading images into a lease's member (kobe load): the caller POSTs one
// image archive, docker-archive (docker save) or OCI (oci-archive), plain or
// gzip-compressed, as the request body. The body is streamed, never held in
// memory, so its SHA-256 travels ahead of it in the Content-Digest header
// (RFC 9530), which an SSH signature covers in place of the body; the server
// checks the body against it before anything reaches the member.
const (
	// ImagesContentType is the body's media type.
	ImagesContentType = "application/x-tar"
	// ContentDigestHeader carries the body's SHA-256 (FormatContentDigest).
	ContentDigestHeader = "Content-Digest"
)

// LeaseImagesPath is the route of a lease's images: POST loads an archive.
func LeaseImagesPath(id string) string { return "/v1/leases/" + url.PathEscape(id) + "/images" }

// LoadedImages answers POST /v1/leases/{id}/images (200): the images the
// archive held, as the member's nodes name them, now on every node.
type LoadedImages struct {
	ID          string   `json:"id"`
	ClusterName string   `json:"cluster_name"`
	Images      []string `json:"images"`
	// Nodes is how many of the member's nodes hold them.
	Nodes int `json:"nodes"`
	// Bytes is the size of the archive received.
	Bytes int64 `json:"bytes"`
}

// FormatContentDigest is the Content-Digest header of a body whose SHA-256
// is sum: `sha-256=:BASE64:`.
func FormatContentDigest(sum [sha256.Size]byte) string {
	return "sha-256=:" + base64.StdEncoding.EncodeToString(sum[:]) + ":"
}

// ParseContentDigest reads the sha-256 member of a Content-Digest header;
// other algorithms beside it are ignored, a header without it is an error.
func ParseContentDigest(h string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	if strings.TrimSpace(h) == "" {
		return sum, errors.New("the Content-Digest header is missing: send the body's SHA-256 as `Content-Digest: sha-256=:BASE64:`")
	}
	for member := range strings.SplitSeq(h, ",") {
		key, value, ok := strings.Cut(strings.TrimSpace(member), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(key), "sha-256") {
			continue
		}
		value = strings.TrimSpace(value)
		if len(value) < 2 || value[0] != ':' || value[len(value)-1] != ':' {
			return sum, errors.New("the Content-Digest sha-256 value must be a byte sequence, `:BASE64:`")
		}
		raw, err := base64.StdEncoding.DecodeString(value[1 : len(value)-1])
		if err != nil || len(raw) != sha256.Size {
			return sum, fmt.Errorf("the Content-Digest sha-256 value must be the base64 of %d bytes", sha256.Size)
		}
		copy(sum[:], raw)
		return sum, nil
	}
	return sum, errors.New("the Content-Digest header has no sha-256 member: send `Content-Digest: sha-256=:BASE64:`")
}

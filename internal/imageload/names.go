package imageload

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// Annotations an OCI index names its images with.
const (
	// containerdImageName is a full reference (ctr export, buildx, nerdctl).
	containerdImageName = "io.containerd.image.name"
	// ociRefName is a full reference for some writers (skopeo, podman) and
	// only a tag for others (buildah, ctr export).
	ociRefName = "org.opencontainers.image.ref.name"
)

// sendInstead ends the messages about archives of the wrong kind.
const sendInstead = "send the output of `docker save NAME:TAG` or `podman save NAME:TAG` (plain or gzip-compressed), or an OCI layout archive whose index.json names each image with an io.containerd.image.name or org.opencontainers.image.ref.name annotation holding a full reference such as docker.io/library/app:v1"

// errDigestOnly is a reference by digest alone: a docker-archive's
// RepoTags cannot carry it, so such an image is unnamed here.
var errDigestOnly = errors.New("names the image by digest only, with no tag")

// reference is a fully qualified reference by tag as containerd writes it
// (the grammar of github.com/distribution/reference): a domain (or a
// bracketed IPv6 address) with an optional port, lower-case path
// components, a tag.
var reference = regexp.MustCompile(`^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?` +
	`(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)+` +
	`:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// containerdName is the name containerd gives an image that a
// docker-archive's RepoTags call s: "app:v1" is "docker.io/library/app:v1",
// "registry.example:5000/team/app" is "registry.example:5000/team/app:latest",
// and a digest after a tag is dropped (it is the digest of a manifest the
// docker-archive does not carry). A reference by digest alone is
// errDigestOnly.
func containerdName(s string) (string, error) {
	if len(s) > 512 {
		return "", fmt.Errorf("is longer than %d bytes", 512)
	}
	base, _, digest := strings.Cut(s, "@")
	if digest && strings.LastIndex(base, ":") <= strings.LastIndex(base, "/") {
		return "", errDigestOnly
	}
	t, err := name.NewTag(base)
	if err != nil {
		return "", fmt.Errorf("is not a valid reference (%w)", err)
	}
	registry := t.RegistryStr()
	if registry == name.DefaultRegistry { // gcr's "index.docker.io"
		registry = "docker.io"
	}
	repo := registry + "/" + t.RepositoryStr()
	ref := repo + ":" + t.TagStr()
	if len(repo) > 255 || !reference.MatchString(ref) {
		return "", fmt.Errorf("is not a reference containerd accepts (it would be %q)", short(ref))
	}
	return ref, nil
}

// ociNames are the names of an OCI index entry, from its annotations;
// without any, why says so, for the error that lists unnamed images. An
// invalid name is an error.
func ociNames(ann map[string]string) (names []string, why string, err error) {
	key, s := containerdImageName, ann[containerdImageName]
	if s == "" {
		key, s = ociRefName, ann[ociRefName]
		if s != "" && !strings.ContainsAny(s, "/:@") {
			return nil, fmt.Sprintf("its %s is %q, a tag without a repository", ociRefName, short(s)), nil
		}
	}
	if s == "" {
		return nil, fmt.Sprintf("it has neither an %s nor an %s annotation", containerdImageName, ociRefName), nil
	}
	n, err := containerdName(s)
	switch {
	case errors.Is(err, errDigestOnly):
		return nil, fmt.Sprintf("its %s %q %v", key, short(s), err), nil
	case err != nil:
		return nil, "", notImage("index.json names an image %q (%s), which %v", short(s), key, err)
	}
	return []string{n}, "", nil
}

// notImage is ErrNotAnImage saying what is wrong.
func notImage(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrNotAnImage, fmt.Sprintf(format, args...))
}

// short cuts a string from the archive to a length fit for a message.
func short(s string) string {
	const n = 100
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

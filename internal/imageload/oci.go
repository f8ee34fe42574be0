package imageload

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// maxIndexEntries bounds the manifests of an index within the layout (a
// multi-platform image): a dozen platforms and their attestations fit.
const maxIndexEntries = 256

// candidate is an image manifest a name may stand for.
type candidate struct {
	desc v1.Descriptor
	// alone: listed in index.json by itself, not as one platform of an
	// index; taken whatever its platform when it is a name's only one.
	alone bool
}

// ociImages reads an OCI layout's index.json: its named images, for the
// platform want where a name stands for several, and why the others are
// unnamed.
func (a *archive) ociImages(want v1.Platform, maxImages int) ([]*image, []string, error) {
	b, err := a.readJSON("index.json", "index.json")
	if err != nil {
		return nil, nil, err
	}
	idx, err := v1.ParseIndexManifest(bytes.NewReader(b))
	switch {
	case err != nil:
		return nil, nil, notImage("index.json is not an OCI index (%v); %s", err, sendInstead)
	case len(idx.Manifests) == 0:
		return nil, nil, notImage("index.json lists no image; " + sendInstead)
	case len(idx.Manifests) > maxImages:
		return nil, nil, notImage("index.json lists %d images, more than the %d one load may hold; load them in several archives", len(idx.Manifests), maxImages)
	}
	var (
		unnamed []string
		names   []string // in index.json's order, for stable messages
		byName  = map[string][]candidate{}
	)
	for i, d := range idx.Manifests {
		ns, why, err := ociNames(d.Annotations)
		if err != nil {
			return nil, nil, err
		}
		if len(ns) == 0 {
			unnamed = append(unnamed, fmt.Sprintf("entry %d of index.json is unnamed: %s", i+1, why))
			continue
		}
		cs, err := a.candidates(d, ns[0])
		if err != nil {
			return nil, nil, err
		}
		for _, n := range ns {
			if _, ok := byName[n]; !ok {
				names = append(names, n)
			}
			for _, c := range cs {
				if !slices.ContainsFunc(byName[n], func(o candidate) bool { return o.desc.Digest == c.desc.Digest }) {
					byName[n] = append(byName[n], c)
				}
			}
		}
	}
	var (
		imgs []*image
		read = map[v1.Hash]*image{}
	)
	for _, n := range names {
		d, err := choose(n, byName[n], want)
		if err != nil {
			return nil, nil, err
		}
		img, ok := read[d.Digest]
		if !ok {
			if img, err = a.ociImage(d, n); err != nil {
				return nil, nil, err
			}
			read[d.Digest] = img
		}
		imgs = append(imgs, &image{names: []string{n}, key: img.key, config: img.config, layers: img.layers})
	}
	return imgs, unnamed, nil
}

// candidates are the image manifests index.json's entry d stands for:
// itself, or the manifests of the index it is.
func (a *archive) candidates(d v1.Descriptor, what string) ([]candidate, error) {
	switch {
	case isManifest(d.MediaType):
		return []candidate{{desc: d, alone: true}}, nil
	case !isIndex(d.MediaType):
		return nil, notImage("index.json lists %s as %s, of media type %q, neither an image nor an index", what, d.Digest, short(string(d.MediaType)))
	}
	b, err := a.readBlob(d, "the index of "+what)
	if err != nil {
		return nil, err
	}
	idx, err := v1.ParseIndexManifest(bytes.NewReader(b))
	switch {
	case err != nil:
		return nil, notImage("the index of %s is not an OCI index (%v)", what, err)
	case len(idx.Manifests) > maxIndexEntries:
		return nil, notImage("the index of %s lists %d manifests, more than the %d kobe reads", what, len(idx.Manifests), maxIndexEntries)
	}
	var cs []candidate
	for _, m := range idx.Manifests {
		if isManifest(m.MediaType) {
			cs = append(cs, candidate{desc: m})
		}
	}
	return cs, nil
}

// choose picks the manifest name stands for on platform want: its only
// one if it was listed alone, else the one of the closest platform.
func choose(name string, cs []candidate, want v1.Platform) (v1.Descriptor, error) {
	if len(cs) == 1 && cs[0].alone {
		return cs[0].desc, nil
	}
	best, bestRank := -1, 0
	var have []string
	for i, c := range cs {
		if r := rank(want, c.desc.Platform); r >= 0 && (best < 0 || r < bestRank) {
			best, bestRank = i, r
		}
		if c.desc.Platform != nil {
			have = append(have, c.desc.Platform.String())
		}
	}
	if best < 0 && len(have) == 0 {
		return v1.Descriptor{}, notImage("index.json gives the name %s to %d images and says of none which platform it is for; give each image its own name", name, len(cs))
	}
	if best < 0 {
		if len(have) > 8 {
			have = append(have[:8], "...")
		}
		return v1.Descriptor{}, notImage("%s has no image for %s (it has %s); build it for %s",
			name, want.String(), strings.Join(have, ", "), want.String())
	}
	return cs[best].desc, nil
}

// rank says how well a manifest for platform have serves want: -1 not at
// all, 0 exactly, 1 on another variant of the same architecture (want
// says no variant, have is not the usual one).
func rank(want v1.Platform, have *v1.Platform) int {
	switch {
	case have == nil || have.OS != want.OS || have.Architecture != want.Architecture:
		return -1
	case variant(*have) == variant(want):
		return 0
	case want.Variant == "":
		return 1
	}
	return -1
}

// variant is p's CPU variant, the usual one where p says none.
func variant(p v1.Platform) string {
	switch {
	case p.Variant != "":
		return p.Variant
	case p.Architecture == "arm64":
		return "v8"
	case p.Architecture == "arm":
		return "v7"
	}
	return ""
}

// ociImage reads an OCI layout's image manifest d and its config, and
// finds its layers' blobs.
func (a *archive) ociImage(d v1.Descriptor, what string) (*image, error) {
	if d.Platform != nil {
		what += " for " + d.Platform.String()
	}
	b, err := a.readBlob(d, "the manifest of "+what)
	if err != nil {
		return nil, err
	}
	m, err := v1.ParseManifest(bytes.NewReader(b))
	if err != nil {
		return nil, notImage("the manifest of %s is not an image manifest (%v)", what, err)
	}
	if mt := m.Config.MediaType; mt != types.OCIConfigJSON && mt != types.DockerConfigJSON {
		return nil, notImage("%s is not a container image: its config is of media type %q", what, short(string(mt)))
	}
	config, err := a.readBlob(m.Config, "the config of "+what)
	if err != nil {
		return nil, err
	}
	diffIDs, err := diffIDs(config, len(m.Layers), what)
	if err != nil {
		return nil, err
	}
	img := &image{key: "manifest " + d.Digest.String(), config: config}
	for i, l := range m.Layers {
		if !isLayer(l.MediaType) {
			return nil, notImage("layer %d of %s is of media type %q, not a layer kobe loads (foreign and non-distributable layers are not in the archive)", i+1, what, short(string(l.MediaType)))
		}
		blob, err := blobName(l.Digest)
		if err != nil {
			return nil, err
		}
		r, _, err := a.open(blob)
		if err != nil {
			return nil, notImage("layer %d of %s, %s, is not in the archive; export the image with all its blobs", i+1, what, l.Digest)
		}
		if r.Size() != l.Size {
			return nil, notImage("layer %d of %s, %s, is %d bytes; its manifest says %d", i+1, what, l.Digest, r.Size(), l.Size)
		}
		img.layers = append(img.layers, layer{blob: blob, diffID: diffIDs[i], digest: l.Digest, size: l.Size})
	}
	return img, nil
}

func isManifest(mt types.MediaType) bool {
	return mt == types.OCIManifestSchema1 || mt == types.DockerManifestSchema2
}

func isIndex(mt types.MediaType) bool {
	return mt == types.OCIImageIndex || mt == types.DockerManifestList
}

func isLayer(mt types.MediaType) bool {
	switch mt {
	case types.OCILayer, types.OCILayerZStd, types.OCIUncompressedLayer, types.DockerLayer, types.DockerUncompressedLayer:
		return true
	}
	return false
}

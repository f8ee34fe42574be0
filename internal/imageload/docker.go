package imageload

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// dockerImages reads a docker-archive's manifest.json: its named images,
// and why the others are unnamed.
func (a *archive) dockerImages(maxImages int) ([]*image, []string, error) {
	b, err := a.readJSON("manifest.json", "manifest.json")
	if err != nil {
		return nil, nil, err
	}
	var m tarball.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, nil, notImage("manifest.json is not a docker-archive's manifest (%v); %s", err, sendInstead)
	}
	switch {
	case len(m) == 0:
		return nil, nil, notImage("manifest.json lists no image; " + sendInstead)
	case len(m) > maxImages:
		return nil, nil, notImage("manifest.json lists %d images, more than the %d one load may hold; load them in several archives", len(m), maxImages)
	}
	var (
		imgs    []*image
		unnamed []string
		tags    int
	)
	for i, d := range m {
		if tags += len(d.RepoTags); tags > maxNames {
			return nil, nil, notImage("manifest.json gives its images more than %d names, the most one load may hold", maxNames)
		}
		what := fmt.Sprintf("image %d of manifest.json", i+1)
		var names []string
		for _, t := range d.RepoTags {
			n, err := containerdName(t)
			if err != nil {
				return nil, nil, notImage("%s is tagged %q, which %v", what, short(t), err)
			}
			names = append(names, n)
		}
		if len(names) == 0 {
			unnamed = append(unnamed, what+" has no RepoTags")
			continue
		}
		img, err := a.dockerImage(d, names[0])
		if err != nil {
			return nil, nil, err
		}
		img.names = names
		imgs = append(imgs, img)
	}
	return imgs, unnamed, nil
}

// dockerImage reads the config of a docker-archive's image and finds its
// layers' files.
func (a *archive) dockerImage(d tarball.Descriptor, what string) (*image, error) {
	config, err := a.readJSON(d.Config, "the config of "+what)
	if err != nil {
		return nil, err
	}
	diffIDs, err := diffIDs(config, len(d.Layers), what)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(config)
	img := &image{config: config, key: fmt.Sprintf("config %x, layers", sum)}
	var key strings.Builder
	for i, l := range d.Layers {
		_, blob, err := a.open(l)
		if err != nil {
			return nil, notImage("layer %d of %s: %v", i+1, what, err)
		}
		img.layers = append(img.layers, layer{blob: blob, diffID: diffIDs[i], size: -1})
		key.WriteString(" " + blob)
	}
	img.key += key.String()
	return img, nil
}

// diffIDs parses an image's config and returns the diff IDs of its
// layers, of which the manifest lists layers.
func diffIDs(config []byte, layers int, what string) ([]v1.Hash, error) {
	cfg, err := v1.ParseConfigFile(bytes.NewReader(config))
	switch {
	case err != nil:
		return nil, notImage("the config of %s is not an image config (%v)", what, err)
	case len(cfg.RootFS.DiffIDs) != layers:
		return nil, notImage("the config of %s lists %d layers, its manifest %d", what, len(cfg.RootFS.DiffIDs), layers)
	case layers > maxLayers:
		return nil, notImage("%s has %d layers, more than the %d kobe loads", what, layers, maxLayers)
	}
	for _, h := range cfg.RootFS.DiffIDs {
		if h.Algorithm != "sha256" {
			return nil, notImage("the config of %s names a layer %s; kobe reads only SHA-256 digests", what, short(h.String()))
		}
	}
	return cfg.RootFS.DiffIDs, nil
}

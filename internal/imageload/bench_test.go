package imageload

import (
	"archive/tar"
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// BenchmarkNormalise normalises a 100 MiB image (four layers of 25 MiB of
// random letters, which gzip makes 60% of that) as each kind of archive
// carries it.
func BenchmarkNormalise(b *testing.B) {
	var layers []v1.Layer
	var raws [][]byte
	for i := range 4 {
		raw := textLayer(b, uint64(i), 25<<20)
		raws = append(raws, raw)
		layers = append(layers, mustLayer(raw))
	}
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	archives := map[string]string{}

	// docker save: uncompressed layers.
	p := filepath.Join(dir, "docker-save.tar")
	es := []tarEntry{}
	cfg := configJSON(b, raws...)
	var files []string
	for i, raw := range raws {
		n := string(rune('a'+i)) + "/layer.tar"
		files = append(files, n)
		es = append(es, tarEntry{name: n, body: raw})
	}
	es = append(es, tarEntry{name: "c.json", body: cfg},
		tarEntry{name: "manifest.json", body: mustJSON(b, tarball.Manifest{{Config: "c.json", RepoTags: []string{"app:v1"}, Layers: files}})})
	writeTar(b, p, es)
	archives["docker save"] = p

	p = filepath.Join(dir, "docker-save.tar.gz")
	writeTar(b, p, es)
	gzipFile(b, p)
	archives["docker save | gzip"] = p

	// gzip layers: crane, ko, jib.
	p = filepath.Join(dir, "gzip-layers.tar")
	if err := tarball.WriteToFile(p, name.MustParseReference("app:v1"), img); err != nil {
		b.Fatal(err)
	}
	archives["docker-archive, gzip layers"] = p

	lp, err := layout.Write(filepath.Join(dir, "layout"), empty.Index)
	if err != nil {
		b.Fatal(err)
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{containerdImageName: "docker.io/library/app:v1"})); err != nil {
		b.Fatal(err)
	}
	p = filepath.Join(dir, "oci.tar")
	tarDir(b, string(lp), p)
	archives["OCI layout, gzip layers"] = p

	for _, k := range []string{"docker save", "docker save | gzip", "docker-archive, gzip layers", "OCI layout, gzip layers"} {
		b.Run(k, func(b *testing.B) {
			st, err := os.Stat(archives[k])
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(st.Size())
			out := filepath.Join(b.TempDir(), "out.tar")
			for b.Loop() {
				if _, err := Normalise(archives[k], out, Options{MaxUnpackedBytes: 1 << 30}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// textLayer is a layer of one file of n random letters from seed.
func textLayer(tb testing.TB, seed uint64, n int) []byte {
	tb.Helper()
	r := rand.New(rand.NewPCG(seed, uint64(n)))
	var body bytes.Buffer
	for body.Len() < n {
		body.WriteByte(byte('a' + r.IntN(26)))
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: "words", Size: int64(body.Len()), Mode: 0o644, Typeflag: tar.TypeReg}); err != nil {
		tb.Fatal(err)
	}
	if _, err := io.Copy(tw, &body); err != nil {
		tb.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

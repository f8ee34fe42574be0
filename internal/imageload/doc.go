// Package imageload turns an image archive uploaded by a lease's holder
// (kobe load) into one docker-archive that `ctr images import` names the
// same way on every node, and says which images it holds; importing it is
// the backends' work, not this package's.
//
// The archive is hostile: its sender is cluster-admin of a leased cluster
// and nothing on the operator's host. So the archive is read in place and
// nothing in it ever becomes a path on disk (its entries are found through
// an index of their offsets; links are followed inside the archive only,
// and refused in an OCI layout); every size is bounded before it is acted
// on (the upload, a gzip-compressed archive once decompressed, each JSON
// document, the layers once decompressed, the file written); memory holds
// JSON documents and fixed buffers, never a layer; and every blob is
// checked against the digest that names it, and every layer against its
// config's diff ID, before a byte is written.
//
// Why one format out: ctr names a docker-archive's images from its
// manifest.json RepoTags, always. An OCI archive's names depend on the
// annotations its writer chose (io.containerd.image.name; or a ref.name
// that may be a full reference or only a tag, which ctr then names
// "import-DATE:tag"), and a multi-platform index may list platforms whose
// blobs it does not hold. Normalise settles that once, here: it picks the
// platform, checks every blob is present and true, names each image as
// containerd will, and writes a docker-archive whose RepoTags are exactly
// those names.
package imageload

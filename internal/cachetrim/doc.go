// Package cachetrim holds the transform the operator's informers apply to
// every object before caching it, so that the cache holds only what kobe
// reads. It must not drop anything a reader or a full Update relies on.
package cachetrim

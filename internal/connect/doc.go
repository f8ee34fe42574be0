// Package connect is kobe's connect proxy: /connect/<lease>/... on the lease
// API's endpoint forwards a lease holder's requests (watches, exec, attach,
// logs -f and port-forward included) to the lease's member, after checking
// on every request, from the operator's cache, that the lease is Bound,
// unexpired and still held by its member and that the caller presents that
// lease's client certificate; it closes a lease's open streams the moment
// the lease ends. The Kubernetes API's paths at the endpoint's root
// (RootPaths: /api, /apis, /version, /openapi...), which clients that drop
// a kubeconfig server's path ask for, are forwarded the same way to the
// lease whose certificate the caller presents (LeaseOf), after the same
// checks. It must not import the HTTP API or the controllers.
package connect

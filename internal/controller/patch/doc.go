// Package patch is the one deferred, fenced status write every kobe
// reconciler ends with, and the fenced finalizer writes before it: changes are
// computed against a snapshot taken after Get, sent as a JSON merge patch
// with a resourceVersion precondition, and a conflict marks the reconcile
// stale instead of overwriting what someone else just wrote. It knows no
// kind, decides nothing and must not import a controller.
package patch

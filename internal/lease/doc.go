// Package lease holds the pure decisions of a lease's life: queue order and
// position, when a lease ends and why, and whether an extension is granted.
// Everything takes the current time as an argument; nothing here talks to
// the API server.
package lease

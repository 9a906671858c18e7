//go:build !unix

package sandbox

// oNoFollow: no such flag here (the sandbox itself needs Linux).
const oNoFollow = 0

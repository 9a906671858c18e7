//go:build !race

package testutil

// race reports whether the test binary was built with the race detector.
const race = false

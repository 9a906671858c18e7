//go:build race

package testutil

// Race reports whether the test binary was built with the race detector.
const Race = true

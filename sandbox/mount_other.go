//go:build !linux

package sandbox

// MountWorkspace needs Linux: elsewhere dir stays a plain directory.
func MountWorkspace(dir string, size int64) bool { return false }

// Unmount undoes MountWorkspace (nothing to do here).
func Unmount(dir string) error { return nil }

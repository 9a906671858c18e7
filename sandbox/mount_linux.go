//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"strconv"
	"syscall"
)

// MountWorkspace makes dir a tmpfs of size bytes, so that the disk limit
// holds for what the sandbox writes there. It returns false (and leaves
// dir a plain directory) where mounting is not allowed; Unmount undoes it.
func MountWorkspace(dir string, size int64) bool {
	err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size="+strconv.FormatInt(size, 10)+",mode=0755")
	return err == nil
}

// Unmount unmounts a MountWorkspace tmpfs (lazily, so that a process
// still holding it cannot block the cleanup).
func Unmount(dir string) error {
	if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("unmount %s: %w", dir, err)
	}
	return nil
}

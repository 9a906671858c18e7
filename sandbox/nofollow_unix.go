//go:build unix

package sandbox

import "syscall"

// oNoFollow makes an open refuse a symlink as its last component.
const oNoFollow = syscall.O_NOFOLLOW

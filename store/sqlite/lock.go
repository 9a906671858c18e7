package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrLocked is wrapped by Open's error when another process holds the
// data dir's lock.
var ErrLocked = errors.New("data dir in use by another process")

// lockPath is the lock file of the store at path: one writer per data
// dir.
func lockPath(path string) string { return path + "-lock" }

// lockStore takes the exclusive lock (flock) of the store at path,
// writing this process's id into the lock file. The lock lasts until the
// returned file is closed, or the process ends.
func lockStore(path string) (*os.File, error) {
	lp := lockPath(path)
	f, err := os.OpenFile(lp, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b := make([]byte, 32)
		n, _ := f.ReadAt(b, 0)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			who := "another process"
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b[:n]))); perr == nil && pid > 0 {
				who = fmt.Sprintf("another process (pid %d)", pid)
			}
			return nil, fmt.Errorf("sqlite store: %s is in use: %s holds %s (one writer per data dir): stop it first, or read with `agl export`, which opens the database read-only: %w",
				filepath.Dir(path), who, lp, ErrLocked)
		}
		return nil, fmt.Errorf("sqlite store: lock %s: %w", lp, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

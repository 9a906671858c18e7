//go:build !linux

package sandbox

import (
	"context"
	"errors"
	"io"
)

// Run needs Linux (bubblewrap); elsewhere it says so.
func Run(ctx context.Context, s Spec, argv []string, stdin io.Reader, stdout, stderr io.Writer) (Result, error) {
	return Result{Argv: argv}, errors.New("sandbox: bubblewrap sandboxes need Linux")
}

// CgroupBackend says there are no sandboxes here.
func CgroupBackend() string { return "none: sandboxes need Linux" }

package main

import (
	"context"
	"io"
	"os"

	"github.com/aglrl/agl/sandbox"
)

// sandboxExec is `agl sandbox exec --spec FILE -- CMD…`, the executable
// behind a repository task's AGL_SANDBOX_EXEC: it exits with the
// command's status, or sandbox.ExitFailed for its own errors.
func sandboxExec(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return sandbox.ExecMain(ctx, args, os.Stdin, stdout, stderr)
}

// sandboxForward is `agl sandbox forward -- CMD…`: inside a sandbox, it
// relays 127.0.0.1:8642 to the gateway socket while CMD runs.
func sandboxForward(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return sandbox.ForwardMain(ctx, args, os.Stdin, stdout, stderr)
}

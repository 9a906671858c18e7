package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/aglrl/agl/sandbox"
)

// runSandbox is `agl sandbox exec --spec FILE -- CMD…`, the executable
// behind a repository task's AGL_SANDBOX_EXEC: it exits with the
// command's status.
func runSandbox(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "exec" {
		return fmt.Errorf("sandbox: want `agl sandbox exec --spec FILE -- COMMAND [ARG…]`")
	}
	os.Exit(sandbox.ExecMain(ctx, args[1:], os.Stdin, stdout, os.Stderr))
	return nil
}

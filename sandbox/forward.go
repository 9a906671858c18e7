package sandbox

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
)

// ForwardPort is the loopback port inside a sandbox whose Spec.Socket is
// set: `agl sandbox forward` relays it to the socket (the attempt's
// gateway routes), so that a harness in the sandbox reaches its gateway
// at http://127.0.0.1:ForwardPort.
const ForwardPort = 8642

// ForwardMain is `agl sandbox forward [--socket PATH] [--port N] -- CMD…`,
// run inside the sandbox: it relays 127.0.0.1:PORT to the unix socket
// while CMD runs, and returns CMD's exit status (ExitFailed when the
// command line was wrong or CMD cannot start; 0 after -h or --help).
func ForwardMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("agl sandbox forward", flag.ContinueOnError)
	sock := fs.String("socket", SocketMount, "the unix socket to relay to")
	port := fs.Int("port", ForwardPort, "the loopback port to listen on")
	if code, done := parseCLI(fs, args, "[--socket PATH] [--port N] -- COMMAND [ARG…]", forwardAbout, stdout, stderr); done {
		return code
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(*port)))
	if err != nil {
		fmt.Fprintln(stderr, "agl sandbox forward:", err)
		return ExitFailed
	}
	defer ln.Close()
	go relay(ln, *sock)
	cmd := exec.CommandContext(ctx, fs.Arg(0), fs.Args()[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	fmt.Fprintln(stderr, "agl sandbox forward:", err)
	return ExitFailed
}

const forwardAbout = `Runs inside a sandbox whose spec has a socket: relays 127.0.0.1:PORT to the attempt's gateway
socket while COMMAND runs, and exits with COMMAND's status (125 when the command line was
wrong or COMMAND cannot start). Arguments after -- are COMMAND's, left alone.`

// relay copies each connection of ln to a fresh connection to the socket.
func relay(ln net.Listener, sock string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			u, err := net.Dial("unix", sock)
			if err != nil {
				fmt.Fprintln(os.Stderr, "agl sandbox forward:", err)
				return
			}
			defer u.Close()
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				io.Copy(u, c)
				u.(*net.UnixConn).CloseWrite()
			}()
			io.Copy(c, u)
			c.(*net.TCPConn).CloseWrite()
			wg.Wait()
		}()
	}
}

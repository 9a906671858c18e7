// Package sandbox runs commands in a bubblewrap (bwrap) sandbox: a fresh
// mount, pid, IPC, UTS, cgroup, user and network namespace; a read-only
// system (/usr and a few /etc entries); a read-write workspace bound at
// /workspace (the cwd); a private /tmp; no network at all, or only a unix
// socket (Spec.Socket) the caller serves; every capability dropped.
//
// Limits: wall time (the command's whole process tree is killed; exit 124),
// CPU seconds (RLIMIT_CPU), memory and processes (a cgroup per command
// when /sys/fs/cgroup allows: v1's memory and pids groups, or on a
// cgroup2-only host a v2 group with memory.max and pids.max, killed
// through cgroup.kill; else RLIMIT_AS and RLIMIT_NPROC; CgroupBackend says
// which), disk (the workspace is a tmpfs of that size when the
// caller can mount one, see MountWorkspace; /tmp always is) and output
// (each stream is cut at Limits.OutputBytes with a marker, the rest is
// drained and counted).
//
// A Spec is JSON, so that `agl sandbox exec --spec FILE -- CMD…` (the
// executable a harness gets as AGL_SANDBOX_EXEC) runs every command of one
// attempt in the same workspace.
package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Mount is where the workspace appears inside the sandbox.
const Mount = "/workspace"

// Limits bound one command. Zero values take DefaultLimits.
type Limits struct {
	// Timeout is the command's wall time (default 60s).
	Timeout time.Duration `json:"timeout" yaml:"timeout"`
	// CPUSeconds bounds the CPU time of each process (default 2× Timeout).
	CPUSeconds int `json:"cpu_seconds" yaml:"cpu_seconds"`
	// MemoryBytes bounds the command's memory (default 2 GiB).
	MemoryBytes int64 `json:"memory_bytes" yaml:"memory_bytes"`
	// Processes bounds the command's processes and threads (default 256).
	Processes int `json:"processes" yaml:"processes"`
	// DiskBytes bounds the workspace and /tmp, each (default 1 GiB).
	DiskBytes int64 `json:"disk_bytes" yaml:"disk_bytes"`
	// OutputBytes is how much of stdout and of stderr, each, is passed on
	// (default 1 MiB).
	OutputBytes int64 `json:"output_bytes" yaml:"output_bytes"`
}

// DefaultLimits are the limits a zero field takes.
var DefaultLimits = Limits{
	Timeout:     60 * time.Second,
	MemoryBytes: 2 << 30,
	Processes:   256,
	DiskBytes:   1 << 30,
	OutputBytes: 1 << 20,
}

// WithDefaults fills the zero fields of l.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits
	if l.Timeout <= 0 {
		l.Timeout = d.Timeout
	}
	if l.CPUSeconds <= 0 {
		l.CPUSeconds = int(max(2*l.Timeout/time.Second, 1))
	}
	if l.MemoryBytes <= 0 {
		l.MemoryBytes = d.MemoryBytes
	}
	if l.Processes <= 0 {
		l.Processes = d.Processes
	}
	if l.DiskBytes <= 0 {
		l.DiskBytes = d.DiskBytes
	}
	if l.OutputBytes <= 0 {
		l.OutputBytes = d.OutputBytes
	}
	return l
}

// Spec describes a sandbox.
type Spec struct {
	// Workspace is the host directory bound read-write at Mount (required).
	Workspace string `json:"workspace"`
	// ReadOnly lists extra host paths bound read-only at the same path
	// (an interpreter outside /usr, a CLI's install dir).
	ReadOnly []string `json:"read_only,omitempty"`
	// Env is the whole environment inside (KEY=VALUE); PATH and HOME
	// default to /usr/local/bin:/usr/bin:/bin and /tmp.
	Env []string `json:"env,omitempty"`
	// Socket, if set, is a host unix socket bound at SocketMount: the
	// only way out of the sandbox.
	Socket string `json:"socket,omitempty"`
	// Limits bound each command.
	Limits Limits `json:"limits"`
	// Journal, if set, is a host file each command appends one JSON line
	// (a Result) to, for the caller's diagnostics.
	Journal string `json:"journal,omitempty"`
	// Cgroups is the parent group's name, under /sys/fs/cgroup/{memory,pids}
	// (v1) or /sys/fs/cgroup (v2), that per-command groups are made in
	// (default "agl").
	Cgroups string `json:"cgroups,omitempty"`
	// Bwrap is the bubblewrap executable (default: bwrap in PATH).
	Bwrap string `json:"bwrap,omitempty"`
	// HostEnv is added to the environment of the host-side processes
	// (the shell that becomes bwrap), never seen inside: for a caller that
	// tells its processes apart by their environment.
	HostEnv []string `json:"host_env,omitempty"`
	// Start, if set, starts the host-side process instead of cmd.Start
	// (a caller that tracks the processes it starts).
	Start func(cmd *exec.Cmd) error `json:"-"`
	// Waited, if set, is called with the host-side process's pid once it
	// has been waited for (a caller that tracks the processes it starts
	// stops tracking it).
	Waited func(pid int) `json:"-"`
}

// SocketMount is where Spec.Socket appears inside the sandbox.
const SocketMount = "/run/agl/gateway.sock"

// Load reads a Spec written by Save.
func Load(path string) (Spec, error) {
	var s Spec
	b, err := os.ReadFile(path)
	if err != nil {
		return s, fmt.Errorf("sandbox spec: %w", err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("sandbox spec %s: %w", path, err)
	}
	return s, s.check()
}

// Save writes s to path (mode 0600).
func (s Spec) Save(path string) error {
	if err := s.check(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

func (s Spec) check() error {
	if s.Workspace == "" {
		return errors.New("sandbox spec: no workspace")
	}
	if !filepath.IsAbs(s.Workspace) {
		return fmt.Errorf("sandbox spec: workspace %q is not an absolute path", s.Workspace)
	}
	for _, p := range s.ReadOnly {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("sandbox spec: read_only path %q is not absolute", p)
		}
	}
	return nil
}

// ExecMain is `agl sandbox exec --spec FILE -- CMD [ARG…]`: it runs CMD in
// the sandbox FILE describes and returns the exit status to exit with
// (the command's; 124 on timeout; ExitFailed when the command line was
// wrong or the sandbox itself failed, with a one-line message on stderr;
// 0 after -h or --help, which prints the usage on stdout).
func ExecMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("agl sandbox exec", flag.ContinueOnError)
	specPath := fs.String("spec", "", "the sandbox spec (JSON) of the attempt (required)")
	if code, done := parseCLI(fs, args, "--spec FILE -- COMMAND [ARG…]", execAbout, stdout, stderr); done {
		return code
	}
	if *specPath == "" {
		return usageFailed(fs, stderr, "want --spec FILE")
	}
	s, err := Load(*specPath)
	if err != nil {
		fmt.Fprintln(stderr, "agl sandbox:", err)
		return ExitFailed
	}
	res, err := Run(ctx, s, fs.Args(), stdin, stdout, stderr)
	if err != nil && ctx.Err() == nil {
		fmt.Fprintln(stderr, "agl sandbox:", err)
		return ExitFailed
	}
	return res.Exit
}

const execAbout = `Runs COMMAND in the sandbox FILE describes (the controller writes one per attempt
from the config's controller.sandbox keys and hands it to the harness as AGL_SANDBOX_EXEC)
and exits with COMMAND's status: 124 when it ran past the sandbox's timeout, 125 when the
command line was wrong or the sandbox failed. Arguments after -- are COMMAND's, left alone.`

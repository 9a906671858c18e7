package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// ExitTimeout is the exit status of a command killed at its wall time.
const ExitTimeout = 124

// Result says how one command ended and which limits it hit.
type Result struct {
	Argv     []string `json:"argv"`
	Exit     int      `json:"exit"`
	Duration float64  `json:"duration_s"`
	// TimedOut: killed at Limits.Timeout (Exit is ExitTimeout).
	TimedOut bool `json:"timed_out,omitempty"`
	// StdoutBytes, StderrBytes are what the command wrote, passed on or not.
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
	// Truncated: output was cut at Limits.OutputBytes; CutBytes is how
	// much of stdout and stderr together was dropped.
	Truncated bool  `json:"truncated,omitempty"`
	CutBytes  int64 `json:"cut_bytes,omitempty"`
	// MemoryLimit, ProcessLimit: the cgroup refused memory or a fork.
	MemoryLimit  bool `json:"memory_limit,omitempty"`
	ProcessLimit bool `json:"process_limit,omitempty"`
	// DiskFull: the workspace had no space left when the command ended.
	DiskFull bool `json:"disk_full,omitempty"`
	// Cgroups is false when memory and processes were bounded by rlimits
	// only (no writable cgroup v1 or v2 hierarchy).
	Cgroups bool `json:"cgroups"`
	// Blocked lists what the command's output shows the sandbox refused
	// (BlockedNetwork, BlockedGit, BlockedReadOnly), as far as the
	// messages of common tools tell.
	Blocked []string `json:"blocked,omitempty"`
}

// What a command's output can show the sandbox blocked (Result.Blocked).
const (
	BlockedNetwork  = "network"
	BlockedGit      = "git"
	BlockedReadOnly = "read_only"
)

// blockedSigns are the messages (libc's, curl's, Python's, git's) that
// show each kind of refusal.
var blockedSigns = []struct{ kind, text string }{
	{BlockedNetwork, "Network is unreachable"},
	{BlockedNetwork, "Could not resolve host"},
	{BlockedNetwork, "Temporary failure in name resolution"},
	{BlockedNetwork, "Failed to connect to"},
	{BlockedNetwork, "Connection refused"},
	{BlockedGit, "not a git repository"},
	{BlockedReadOnly, "Read-only file system"},
	// A refused fork, whichever limit refused it (the cgroup's pids.max,
	// RLIMIT_NPROC): shells and libc say so. Counted as ProcessLimit, not
	// listed in Blocked.
	{forkRefused, "fork: retry: Resource temporarily unavailable"},
	{forkRefused, "fork: Resource temporarily unavailable"},
	{forkRefused, "Cannot fork"},
}

// forkRefused is the sign kind of a refused fork.
const forkRefused = "fork"

// has reports whether a sign of kind was seen.
func (s *signs) has(kind string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[kind]
}

// signs collects the kinds of blockedSigns seen in the output streams.
type signs struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (s *signs) scan(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sg := range blockedSigns {
		if !s.seen[sg.kind] && bytes.Contains(b, []byte(sg.text)) {
			if s.seen == nil {
				s.seen = map[string]bool{}
			}
			s.seen[sg.kind] = true
		}
	}
}

func (s *signs) list() []string {
	var l []string
	for _, k := range []string{BlockedNetwork, BlockedGit, BlockedReadOnly} {
		if s.seen[k] {
			l = append(l, k)
		}
	}
	return l
}

// Limited lists the limits r hit, in words ("timeout 60s", "output", …).
func (r Result) Limited() []string {
	var l []string
	if r.TimedOut {
		l = append(l, "timeout")
	}
	if r.Truncated {
		l = append(l, "output")
	}
	if r.MemoryLimit {
		l = append(l, "memory")
	}
	if r.ProcessLimit {
		l = append(l, "processes")
	}
	if r.DiskFull {
		l = append(l, "disk")
	}
	return l
}

// CopyOutput copies r to w up to n bytes, then writes the cut's marker
// line ("[agl sandbox: STREAM truncated at N bytes]") and reads and drops
// the rest; it returns the bytes read. It is how a command's output is
// bounded, for a process outside the sandbox too.
func CopyOutput(w io.Writer, r io.Reader, n int64, stream string) int64 {
	var seen signs
	total, _ := copyLimited(w, r, n, stream, &seen)
	return total
}

// copyLimited copies r to w up to n bytes, then writes a marker and
// drains the rest; it returns the bytes read and whether it cut. What it
// passes on is scanned for blockedSigns.
func copyLimited(w io.Writer, r io.Reader, n int64, stream string, seen *signs) (int64, bool) {
	var total int64
	buf := make([]byte, 64<<10)
	var edge []byte // the end of the previous chunk, for a sign cut in two
	cut := false
	for {
		k, err := r.Read(buf)
		if k > 0 {
			if room := n - total; room > 0 {
				part := buf[:min(int64(k), room)]
				w.Write(part)
				joined := append(edge, part...)
				seen.scan(joined)
				edge = append([]byte(nil), joined[max(len(joined)-64, 0):]...)
			}
			total += int64(k)
			if total > n && !cut {
				cut = true
				fmt.Fprintf(w, "\n[agl sandbox: %s truncated at %d bytes]\n", stream, n)
			}
		}
		if err != nil {
			return total, cut
		}
	}
}

func appendJournal(path string, r Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("sandbox journal: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	return errors.Join(err, f.Close())
}

// ReadJournal reads the Results a spec's journal holds.
func ReadJournal(path string) ([]Result, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rs []Result
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var r Result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return rs, fmt.Errorf("sandbox journal %s: %w", path, err)
		}
		rs = append(rs, r)
	}
	return rs, nil
}

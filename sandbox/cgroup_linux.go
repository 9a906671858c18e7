//go:build linux

package sandbox

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aglrl/agl/internal/pidfd"
)

// cgroupRoot is where the host's cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// cgroups is the cgroup backend a host gives the per-command groups:
// cgroup v1 (a memory and a pids hierarchy under root), cgroup v2 (the
// unified hierarchy at root, with the memory and pids controllers), or
// none (memory and processes bounded by rlimits).
type cgroups struct {
	version int    // 1, 2; 0: none
	root    string // the mount
	why     string // version 0: why none
	dirs    groupDirs
}

// groupDirs makes and removes a group's directory: os.Mkdir and
// os.Remove, with which the kernel fills and empties it.
type groupDirs struct {
	mkdir func(string, os.FileMode) error
	rmdir func(string) error
}

var kernelDirs = groupDirs{mkdir: os.Mkdir, rmdir: os.Remove}

// detectCgroups reads root's layout: v1 where memory/ and pids/ are v1
// hierarchies ("tasks" is v1's), v2 where root itself is the unified
// hierarchy (cgroup.controllers) offering memory and pids.
func detectCgroups(root string) cgroups {
	c := cgroups{root: root, dirs: kernelDirs}
	v1 := true
	for _, h := range []string{"memory", "pids"} {
		if _, err := os.Stat(filepath.Join(root, h, "tasks")); err != nil {
			v1 = false
		}
	}
	if v1 {
		c.version = 1
		return c
	}
	b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		c.why = "no cgroup v1 memory and pids hierarchies, and no cgroup v2 hierarchy at " + root
		return c
	}
	have := strings.Fields(string(b))
	for _, ctl := range []string{"memory", "pids"} {
		if !slices.Contains(have, ctl) {
			c.why = fmt.Sprintf("the cgroup v2 hierarchy at %s offers no %s controller (cgroup.controllers: %q)", root, ctl, strings.TrimSpace(string(b)))
			return c
		}
	}
	c.version = 2
	return c
}

// CgroupBackend says which backend bounds the memory and processes of
// sandboxed commands on this host, after making sure it can (cgroup v2:
// the memory and pids controllers delegated to the "agl" parent group):
// for a caller to log at start-up.
func CgroupBackend() string {
	return detectCgroups(cgroupRoot).describe("agl")
}

func (c cgroups) describe(parent string) string {
	switch c.version {
	case 1:
		return "cgroup v1: memory and pids groups under " + filepath.Join(c.root, "{memory,pids}", parent)
	case 2:
		if err := c.parentV2(parent); err != nil {
			return "none, rlimits only (RLIMIT_AS, RLIMIT_NPROC, which does not bind root): cgroup v2 at " + c.root + ": " + err.Error()
		}
		return "cgroup v2: groups under " + filepath.Join(c.root, parent) + " (memory.max, pids.max)"
	}
	return "none, rlimits only (RLIMIT_AS, RLIMIT_NPROC, which does not bind root): " + c.why
}

// parentV2 makes root/parent a group whose children get the memory and
// pids controllers: enabled in root's cgroup.subtree_control (the root
// may have processes of its own) and in the parent's (which has none).
func (c cgroups) parentV2(parent string) error {
	if err := enableControllers(filepath.Join(c.root, "cgroup.subtree_control")); err != nil {
		return err
	}
	dir := filepath.Join(c.root, parent)
	if err := c.dirs.mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("make %s: %w", dir, err)
	}
	return enableControllers(filepath.Join(dir, "cgroup.subtree_control"))
}

// enableControllers writes "+memory +pids" to a cgroup.subtree_control
// that does not list both yet.
func enableControllers(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	on := strings.Fields(string(b))
	var add []string
	for _, ctl := range []string{"memory", "pids"} {
		if !slices.Contains(on, ctl) {
			add = append(add, "+"+ctl)
		}
	}
	if len(add) == 0 {
		return nil
	}
	if err := writeCgroupFile(path, strings.Join(add, " ")); err != nil {
		return fmt.Errorf("enable the memory and pids controllers (not delegated?): %w", err)
	}
	return nil
}

// writeCgroupFile writes one value to an existing control file (a
// missing file is an error: the controller is not enabled there).
func writeCgroupFile(path, v string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(v)
	return errors.Join(err, f.Close())
}

// cgroup is one command's groups: v1's memory and pids directories, or
// v2's one directory; none when they could not be made.
type cgroup struct {
	version   int
	mem, pids string // v1
	dir       string // v2
	name      string // the group's own (random) name
	dirs      groupDirs
}

func newCgroup(cgs cgroups, parent string, lim Limits) *cgroup {
	if parent == "" {
		parent = "agl"
	}
	cgs.removeStale(parent, staleAge, time.Now())
	var b [8]byte
	rand.Read(b[:])
	name := hex.EncodeToString(b[:])
	switch cgs.version {
	case 1:
		return newCgroupV1(cgs, parent, name, lim)
	case 2:
		return newCgroupV2(cgs, parent, name, lim)
	}
	return &cgroup{}
}

// staleAge is how long an empty group stays before another command's
// set-up removes it: far longer than the moment between a group's mkdir
// and its first process joining it.
const staleAge = time.Minute

// removeStale removes the empty groups under parent made more than age
// before now: those of a command whose `agl sandbox exec` was SIGKILLed
// (a controller's sweep of a left-behind sandbox) before its own remove
// ran. Only groups named as newCgroup names them are touched, and a group
// with a process in it never goes (the kernel refuses its rmdir).
func (c cgroups) removeStale(parent string, age time.Duration, now time.Time) {
	var dirs []string
	switch c.version {
	case 1:
		dirs = []string{filepath.Join(c.root, "memory", parent), filepath.Join(c.root, "pids", parent)}
	case 2:
		dirs = []string{filepath.Join(c.root, parent)}
	}
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if !e.IsDir() || !isGroupName(e.Name()) {
				continue
			}
			if fi, err := e.Info(); err == nil && now.Sub(fi.ModTime()) > age {
				c.dirs.rmdir(filepath.Join(dir, e.Name()))
			}
		}
	}
}

// isGroupName reports whether name is one newCgroup makes: 16 lower-case
// hex digits.
func isGroupName(name string) bool {
	if len(name) != 16 {
		return false
	}
	for _, r := range name {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
			return false
		}
	}
	return true
}

func newCgroupV1(cgs cgroups, parent, name string, lim Limits) *cgroup {
	mem := filepath.Join(cgs.root, "memory", parent, name)
	pids := filepath.Join(cgs.root, "pids", parent, name)
	if os.MkdirAll(mem, 0o755) != nil || os.MkdirAll(pids, 0o755) != nil {
		os.Remove(mem)
		os.Remove(pids)
		return &cgroup{}
	}
	c := &cgroup{version: 1, mem: mem, pids: pids, name: name, dirs: cgs.dirs}
	err := errors.Join(
		os.WriteFile(filepath.Join(mem, "memory.limit_in_bytes"), []byte(strconv.FormatInt(lim.MemoryBytes, 10)), 0),
		os.WriteFile(filepath.Join(pids, "pids.max"), []byte(strconv.Itoa(lim.Processes)), 0),
	)
	// Without swap accounting there is no memsw file; where there is one,
	// swap counts too.
	os.WriteFile(filepath.Join(mem, "memory.memsw.limit_in_bytes"), []byte(strconv.FormatInt(lim.MemoryBytes, 10)), 0)
	if err != nil {
		c.remove()
		return &cgroup{}
	}
	return c
}

func newCgroupV2(cgs cgroups, parent, name string, lim Limits) *cgroup {
	if cgs.parentV2(parent) != nil {
		return &cgroup{}
	}
	dir := filepath.Join(cgs.root, parent, name)
	if cgs.dirs.mkdir(dir, 0o755) != nil {
		return &cgroup{}
	}
	c := &cgroup{version: 2, dir: dir, name: name, dirs: cgs.dirs}
	err := errors.Join(
		writeCgroupFile(filepath.Join(dir, "memory.max"), strconv.FormatInt(lim.MemoryBytes, 10)),
		writeCgroupFile(filepath.Join(dir, "pids.max"), strconv.Itoa(lim.Processes)),
	)
	// Swap is bounded apart in v2: none, as v1's memsw limit equal to the
	// memory limit leaves none (no file without swap accounting).
	writeCgroupFile(filepath.Join(dir, "memory.swap.max"), "0")
	if err != nil {
		c.remove()
		return &cgroup{}
	}
	return c
}

func (c *cgroup) ok() bool { return c.version != 0 }

// procs are the cgroup.procs files the command's shell joins.
func (c *cgroup) procs() []string {
	switch c.version {
	case 1:
		return []string{filepath.Join(c.mem, "cgroup.procs"), filepath.Join(c.pids, "cgroup.procs")}
	case 2:
		return []string{filepath.Join(c.dir, "cgroup.procs")}
	}
	return nil
}

// members is the group whose cgroup.procs lists every process of the
// command.
func (c *cgroup) members() string {
	if c.version == 1 {
		return c.pids
	}
	return c.dir
}

// kill SIGKILLs every process left in the groups: at once through v2's
// cgroup.kill where the kernel has it (5.14+), else pid by pid, each
// through a pidfd and only while /proc says it is still in the group (a
// pid read from cgroup.procs may be an unrelated process's by the time it
// is signalled).
func (c *cgroup) kill() {
	if !c.ok() {
		return
	}
	if c.version == 2 {
		writeCgroupFile(filepath.Join(c.dir, "cgroup.kill"), "1")
	}
	for range 500 {
		b, _ := os.ReadFile(filepath.Join(c.members(), "cgroup.procs"))
		fields := strings.Fields(string(b))
		if len(fields) == 0 {
			return
		}
		for _, f := range fields {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				pidfd.Signal(pid, syscall.SIGKILL, c.holds)
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// holds reports whether pid is in the group, as /proc/PID/cgroup says
// (its path ends in the group's random name, whatever cgroup namespace
// the path is relative to).
func (c *cgroup) holds(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		if bytes.HasSuffix(line, []byte("/"+c.name)) {
			return true
		}
	}
	return false
}

// hit reports whether the memory or pids limit refused something.
func (c *cgroup) hit() (mem, pids bool) {
	switch c.version {
	case 1:
		// oom_kill counts the processes the limit killed (failcnt also
		// counts page cache reclaimed at the limit, which is no failure).
		mem = eventCount(filepath.Join(c.mem, "memory.oom_control"), "oom_kill") > 0
		pids = eventCount(filepath.Join(c.pids, "pids.events"), "max") > 0
	case 2:
		// memory.events' "max" counts reclaim at the limit too; oom_kill
		// the processes it killed.
		mem = eventCount(filepath.Join(c.dir, "memory.events"), "oom_kill") > 0
		pids = eventCount(filepath.Join(c.dir, "pids.events"), "max") > 0
	}
	return mem, pids
}

// eventCount reads the count of key in a flat-keyed cgroup file
// ("key N" lines); 0 when absent.
func eventCount(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == key {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

func (c *cgroup) remove() {
	if !c.ok() {
		return
	}
	c.kill()
	dirs := []string{c.dir}
	if c.version == 1 {
		dirs = []string{c.mem, c.pids}
	}
	for range 500 {
		gone := true
		for _, d := range dirs {
			if err := c.dirs.rmdir(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				gone = false
			}
		}
		if gone {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

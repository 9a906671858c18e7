//go:build linux

package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeKernel makes and removes group directories in a temp dir laid out
// like a cgroup2 mount, filling a new group with the interface files the
// kernel gives one (their initial contents as in Linux 6.x); withKill adds
// cgroup.kill (Linux 5.14+).
func fakeKernel(withKill bool) groupDirs {
	return groupDirs{
		mkdir: func(dir string, perm os.FileMode) error {
			if err := os.Mkdir(dir, perm); err != nil {
				return err
			}
			files := map[string]string{
				"cgroup.procs": "", "cgroup.subtree_control": "", "cgroup.controllers": "memory pids\n",
				"cgroup.events": "populated 0\nfrozen 0\n", "memory.max": "max\n", "memory.swap.max": "max\n",
				"memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
				"pids.max":      "max\n", "pids.events": "max 0\n",
			}
			if withKill {
				files["cgroup.kill"] = ""
			}
			for name, s := range files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
					return err
				}
			}
			return nil
		},
		rmdir: os.RemoveAll,
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// layout writes files (path → contents; a path ending in / is a
// directory) under a new temp dir.
func layout(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, s := range files {
		f := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			os.MkdirAll(f, 0o755)
			continue
		}
		os.MkdirAll(filepath.Dir(f), 0o755)
		if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestDetectCgroups: the backend follows the host's layout — v1
// hierarchies, the v2 unified hierarchy with or without the memory and
// pids controllers (or delegation), or neither.
func TestDetectCgroups(t *testing.T) {
	cases := []struct {
		name    string
		files   map[string]string
		version int
		says    string // in the description
	}{
		{"v1", map[string]string{"memory/tasks": "", "pids/tasks": "", "cpu/tasks": ""}, 1, "cgroup v1"},
		{"v2", map[string]string{"cgroup.controllers": "cpuset cpu io memory hugetlb pids rdma misc\n", "cgroup.subtree_control": "cpu\n"}, 2, "cgroup v2: groups under"},
		{"v2 without pids", map[string]string{"cgroup.controllers": "cpu io memory\n", "cgroup.subtree_control": ""}, 0, "no pids controller"},
		{"v2 not delegated", map[string]string{"cgroup.controllers": "memory pids\n"}, 2, "none, rlimits only"},
		{"hybrid: v1 memory, v2 unified beside", map[string]string{"memory/tasks": "", "unified/cgroup.controllers": ""}, 0, "no cgroup v1 memory and pids hierarchies"},
		{"nothing", map[string]string{"x/": ""}, 0, "none, rlimits only"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cgs := detectCgroups(layout(t, c.files))
			cgs.dirs = fakeKernel(true)
			if cgs.version != c.version {
				t.Errorf("version %d, want %d (%s)", cgs.version, c.version, cgs.why)
			}
			if d := cgs.describe("agl"); !strings.Contains(d, c.says) {
				t.Errorf("describe: %q, want %q in it", d, c.says)
			}
		})
	}
	if d := CgroupBackend(); d == "" {
		t.Error("no backend described for this host")
	} else {
		t.Logf("this host: %s", d)
	}
}

// TestCgroupV2Files: on a tree laid out like a cgroup2 mount, a command's
// group is made under agl/ with the controllers delegated on the way
// (cgroup.subtree_control), its limits written (memory.max, pids.max,
// memory.swap.max), joined through its cgroup.procs, read for hit limits
// (memory.events' oom_kill, pids.events' max), killed through cgroup.kill
// where there is one, and removed.
func TestCgroupV2Files(t *testing.T) {
	lim := Limits{MemoryBytes: 256 << 20, Processes: 64}.WithDefaults()
	cases := []struct {
		name         string
		rootSubtree  string // root's cgroup.subtree_control before
		wantRootWrit string // what was written to it ("" = left alone)
		withKill     bool
		events       map[string]string // written to the group's files before hit()
		mem, pids    bool
	}{
		{name: "fresh host", rootSubtree: "", wantRootWrit: "+memory +pids", withKill: true},
		{name: "pids already delegated", rootSubtree: "cpu pids\n", wantRootWrit: "+memory", withKill: true},
		{name: "both already delegated", rootSubtree: "memory pids\n", withKill: true},
		{name: "memory limit hit", rootSubtree: "memory pids\n", withKill: true,
			events: map[string]string{"memory.events": "low 0\nhigh 0\nmax 812\noom 3\noom_kill 2\noom_group_kill 0\n"}, mem: true},
		{name: "reclaim at the limit is no hit", rootSubtree: "memory pids\n", withKill: true,
			events: map[string]string{"memory.events": "low 0\nhigh 0\nmax 812\noom 0\noom_kill 0\n"}},
		{name: "process limit hit, no cgroup.kill", rootSubtree: "memory pids\n",
			events: map[string]string{"pids.events": "max 17\n"}, pids: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := layout(t, map[string]string{"cgroup.controllers": "cpu io memory pids\n", "cgroup.subtree_control": c.rootSubtree, "cgroup.procs": "1\n"})
			cgs := detectCgroups(root)
			cgs.dirs = fakeKernel(c.withKill)
			if cgs.version != 2 {
				t.Fatalf("version %d (%s)", cgs.version, cgs.why)
			}
			cg := newCgroup(cgs, "", lim)
			if !cg.ok() {
				t.Fatal("no group made")
			}
			want := c.rootSubtree
			if c.wantRootWrit != "" {
				want = c.wantRootWrit
			}
			if got := read(t, filepath.Join(root, "cgroup.subtree_control")); got != want {
				t.Errorf("root cgroup.subtree_control %q, want %q", got, want)
			}
			if got := read(t, filepath.Join(root, "agl", "cgroup.subtree_control")); got != "+memory +pids" {
				t.Errorf("agl/cgroup.subtree_control %q, want +memory +pids", got)
			}
			if filepath.Dir(cg.dir) != filepath.Join(root, "agl") {
				t.Errorf("group %s, want it under agl/", cg.dir)
			}
			for f, v := range map[string]string{"memory.max": "268435456", "pids.max": "64", "memory.swap.max": "0"} {
				if got := read(t, filepath.Join(cg.dir, f)); got != v {
					t.Errorf("%s %q, want %q", f, got, v)
				}
			}
			if p := cg.procs(); len(p) != 1 || p[0] != filepath.Join(cg.dir, "cgroup.procs") {
				t.Errorf("procs %v, want the group's one cgroup.procs", p)
			}
			for f, s := range c.events {
				os.WriteFile(filepath.Join(cg.dir, f), []byte(s), 0o644)
			}
			if mem, pids := cg.hit(); mem != c.mem || pids != c.pids {
				t.Errorf("hit: memory %v processes %v, want %v %v", mem, pids, c.mem, c.pids)
			}
			cg.kill()
			if c.withKill {
				if got := read(t, filepath.Join(cg.dir, "cgroup.kill")); got != "1" {
					t.Errorf("cgroup.kill %q, want 1", got)
				}
			} else if _, err := os.Stat(filepath.Join(cg.dir, "cgroup.kill")); err == nil {
				t.Error("cgroup.kill made where the kernel has none")
			}
			dir := cg.dir
			cg.remove()
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("group not removed: %v", err)
			}
			if _, err := os.Stat(filepath.Join(root, "agl")); err != nil {
				t.Errorf("the agl parent was removed: %v", err)
			}
		})
	}
	t.Run("limits not writable", func(t *testing.T) {
		root := layout(t, map[string]string{"cgroup.controllers": "memory pids\n", "cgroup.subtree_control": "memory pids\n"})
		cgs := detectCgroups(root)
		dirs := fakeKernel(true)
		cgs.dirs.rmdir = dirs.rmdir
		cgs.dirs.mkdir = func(dir string, perm os.FileMode) error {
			if err := dirs.mkdir(dir, perm); err != nil {
				return err
			}
			if filepath.Base(dir) != "agl" {
				os.Remove(filepath.Join(dir, "pids.max")) // pids not enabled here
			}
			return nil
		}
		if cg := newCgroup(cgs, "", lim); cg.ok() {
			t.Fatal("a group without pids.max was used")
		}
		if des, _ := os.ReadDir(filepath.Join(root, "agl")); len(des) != len(mustFakeFiles(t)) {
			t.Errorf("the failed group was left behind: %d entries under agl/", len(des))
		}
	})
}

// mustFakeFiles lists the files fakeKernel puts in a new group.
func mustFakeFiles(t *testing.T) []os.DirEntry {
	t.Helper()
	d := filepath.Join(t.TempDir(), "g")
	if err := fakeKernel(true).mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	des, _ := os.ReadDir(d)
	return des
}

// TestRemoveStaleGroups (the host's real cgroup v1 hierarchies, as root):
// a new command's set-up removes the empty groups a SIGKILLed `agl
// sandbox exec` left behind, and nothing else: not a fresh group, not a
// group with a process in it, not a group agl did not name.
func TestRemoveStaleGroups(t *testing.T) {
	cgs := detectCgroups(cgroupRoot)
	if cgs.version != 1 || os.Geteuid() != 0 {
		t.Skip("needs root on a cgroup v1 host")
	}
	parent := "agl-test-" + strconv.Itoa(os.Getpid())
	old := time.Now().Add(-2 * staleAge)
	mk := func(name string, mtime time.Time) {
		for _, h := range []string{"memory", "pids"} {
			d := filepath.Join(cgroupRoot, h, parent, name)
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(d, mtime, mtime); err != nil {
				t.Fatal(err)
			}
		}
	}
	const (
		stale = "00000000000000aa"
		fresh = "00000000000000bb"
		busy  = "00000000000000cc"
		other = "not-agls-group"
	)
	mk(stale, old)
	mk(fresh, time.Now())
	mk(busy, old)
	mk(other, old)
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	pid := []byte(strconv.Itoa(sleep.Process.Pid))
	if err := os.WriteFile(filepath.Join(cgroupRoot, "pids", parent, busy, "cgroup.procs"), pid, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cgroupRoot, "memory", parent, busy, "cgroup.procs"), pid, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sleep.Process.Kill()
		sleep.Wait()
		for _, h := range []string{"memory", "pids"} {
			entries, _ := os.ReadDir(filepath.Join(cgroupRoot, h, parent))
			for _, e := range entries {
				os.Remove(filepath.Join(cgroupRoot, h, parent, e.Name()))
			}
			os.Remove(filepath.Join(cgroupRoot, h, parent))
		}
	})

	cg := newCgroup(cgs, parent, Limits{}.WithDefaults())
	if !cg.ok() {
		t.Fatal("no group made")
	}
	cg.remove()
	for _, h := range []string{"memory", "pids"} {
		for name, want := range map[string]bool{stale: false, fresh: true, busy: true, other: true} {
			_, err := os.Stat(filepath.Join(cgroupRoot, h, parent, name))
			if got := err == nil; got != want {
				t.Errorf("%s/%s: there %v, want %v", h, name, got, want)
			}
		}
	}
}

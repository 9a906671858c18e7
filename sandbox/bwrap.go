package sandbox

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// systemLinks are top-level system paths: a merged-/usr host has them as
// symlinks into /usr (recreated as such), others as directories (bound
// read-only).
var systemLinks = []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// etcEntries are the /etc files and directories programs commonly need;
// the rest of /etc (shadow, the host's configs) stays out.
var etcEntries = []string{
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
	"/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/hosts", "/etc/localtime",
	"/etc/ssl", "/etc/ca-certificates", "/etc/mime.types", "/etc/python3", "/etc/python3.11",
}

// DefaultPath is PATH inside the sandbox unless Spec.Env sets it.
const DefaultPath = "/usr/local/bin:/usr/bin:/bin"

// Args returns bwrap's arguments (without the bwrap program itself) to run
// argv in the sandbox s describes.
func Args(s Spec, argv []string) []string {
	lim := s.Limits.WithDefaults()
	a := []string{
		"--die-with-parent", "--new-session",
		"--unshare-all", "--unshare-user", "--disable-userns",
		"--cap-drop", "ALL",
		"--hostname", "sandbox",
		"--ro-bind", "/usr", "/usr",
	}
	for _, p := range systemLinks {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if t, err := os.Readlink(p); err == nil {
				a = append(a, "--symlink", t, p)
			}
		case fi.IsDir():
			a = append(a, "--ro-bind", p, p)
		}
	}
	for _, p := range etcEntries {
		a = append(a, "--ro-bind-try", p, p)
	}
	for _, p := range s.ReadOnly {
		a = append(a, "--ro-bind-try", p, p)
	}
	a = append(a,
		"--proc", "/proc", "--dev", "/dev",
		"--size", strconv.FormatInt(lim.DiskBytes, 10), "--tmpfs", "/tmp",
		"--bind", s.Workspace, Mount, "--chdir", Mount,
	)
	if s.Socket != "" {
		a = append(a, "--dir", filepath.Dir(SocketMount), "--bind", s.Socket, SocketMount)
	}
	a = append(a, "--clearenv")
	for _, kv := range Env(s) {
		k, v, _ := strings.Cut(kv, "=")
		a = append(a, "--setenv", k, v)
	}
	return append(append(a, "--"), argv...)
}

// Env is the environment inside the sandbox: Spec.Env plus PATH, HOME,
// LANG and TMPDIR where it does not set them.
func Env(s Spec) []string {
	env := append([]string(nil), s.Env...)
	set := map[string]bool{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	for _, kv := range []string{"PATH=" + DefaultPath, "HOME=/tmp", "TMPDIR=/tmp", "LANG=C.UTF-8", "TERM=dumb"} {
		if k, _, _ := strings.Cut(kv, "="); !set[k] {
			env = append(env, kv)
		}
	}
	return env
}

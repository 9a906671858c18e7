package sandbox

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// CheckHidden validates hidden paths (relative to the repository root, no
// "..", not ".git") and returns them cleaned.
func CheckHidden(hidden []string) ([]string, error) {
	out := make([]string, 0, len(hidden))
	for _, h := range hidden {
		c := path.Clean(strings.TrimSuffix(h, "/"))
		if h == "" || path.IsAbs(c) || c == "." || c == ".." || strings.HasPrefix(c, "../") {
			return nil, fmt.Errorf("hidden file %q: want a path inside the repository", h)
		}
		out = append(out, c)
	}
	return out, nil
}

// isHidden reports whether rel (slash-separated) is or lies under one of
// hidden.
func isHidden(rel string, hidden []string) bool {
	for _, h := range hidden {
		if rel == h || strings.HasPrefix(rel, h+"/") {
			return true
		}
	}
	return false
}

// Prepare fills ws (an empty directory) with the repository at src — a
// directory, or a .tar / .tar.gz / .tgz file whose paths are relative to
// the repository root — without .git and without the hidden paths; those
// are written to pristine instead (when pristine is not "").
func Prepare(src, ws, pristine string, hidden []string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("repository: %w", err)
	}
	put := func(rel string) string {
		if rel == ".git" || strings.HasPrefix(rel, ".git/") {
			return ""
		}
		if isHidden(rel, hidden) {
			if pristine == "" {
				return ""
			}
			return filepath.Join(pristine, filepath.FromSlash(rel))
		}
		return filepath.Join(ws, filepath.FromSlash(rel))
	}
	if fi.IsDir() {
		return copyTree(src, put)
	}
	return extractTar(src, put)
}

// CopyTree copies the tree at src into dst (an existing directory),
// leaving out the paths skip reports (slash-separated, relative). Files,
// directories and symlinks (as links, never followed) are copied; other
// kinds are left out.
func CopyTree(src, dst string, skip func(rel string) bool) error {
	return copyTree(src, func(rel string) string {
		if skip != nil && skip(rel) {
			return ""
		}
		return filepath.Join(dst, filepath.FromSlash(rel))
	})
}

func copyTree(src string, put func(rel string) string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		to := put(rel)
		if to == "" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case d.IsDir():
			return mkdirNoFollow(to)
		case d.Type()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := mkdirNoFollow(filepath.Dir(to)); err != nil {
				return err
			}
			return os.Symlink(t, to)
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			return writeFile(to, f, fi.Mode().Perm())
		}
		return nil
	})
}

func extractTar(src string, put func(rel string) string) error {
	f, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("repository: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(src, ".gz") || strings.HasSuffix(src, ".tgz") {
		gz, err := gzip.NewReader(f)
		if err != nil {
			return fmt.Errorf("repository %s: %w", src, err)
		}
		defer gz.Close()
		r = gz
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("repository %s: %w", src, err)
		}
		rel := path.Clean(strings.TrimPrefix(h.Name, "/"))
		if rel == "." {
			continue
		}
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return fmt.Errorf("repository %s: entry %q leaves the repository", src, h.Name)
		}
		to := put(rel)
		if to == "" {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = mkdirNoFollow(to)
		case tar.TypeReg:
			err = writeFile(to, tr, fs.FileMode(h.Mode).Perm())
		case tar.TypeSymlink:
			if err = mkdirNoFollow(filepath.Dir(to)); err == nil {
				err = os.Symlink(h.Linkname, to)
			}
		}
		if err != nil {
			return fmt.Errorf("repository %s: %s: %w", src, h.Name, err)
		}
	}
}

// RestoreHidden copies the pristine hidden files into dir, replacing
// whatever lies at their paths (a symlink on the way included, so that
// nothing is written outside dir), and returns the hidden paths that dir
// held before (the agent made or changed them).
func RestoreHidden(pristine, dir string, hidden []string) (found []string, err error) {
	for _, h := range hidden {
		p := filepath.Join(dir, filepath.FromSlash(h))
		if _, err := os.Lstat(p); err == nil {
			found = append(found, h)
		}
		if err := removeNoFollow(dir, h); err != nil {
			return found, err
		}
	}
	if _, err := os.Stat(pristine); errors.Is(err, os.ErrNotExist) {
		return found, nil
	}
	return found, copyTree(pristine, func(rel string) string { return filepath.Join(dir, filepath.FromSlash(rel)) })
}

// removeNoFollow removes dir/rel, first replacing any symlink among its
// parents by nothing, so that the removal stays inside dir.
func removeNoFollow(dir, rel string) error {
	parts := strings.Split(rel, "/")
	cur := dir
	for i, part := range parts {
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if i == len(parts)-1 || fi.Mode()&fs.ModeSymlink != 0 || !fi.IsDir() {
			if i < len(parts)-1 {
				return os.Remove(cur) // a link or file where a directory should be
			}
			return os.RemoveAll(cur)
		}
	}
	return nil
}

// mkdirNoFollow makes dir and its parents, refusing to go through a
// symlink.
func mkdirNoFollow(dir string) error {
	if fi, err := os.Lstat(dir); err == nil {
		if fi.IsDir() {
			return nil
		}
		return fmt.Errorf("%s: not a directory", dir)
	}
	if err := mkdirNoFollow(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return nil
}

func writeFile(to string, r io.Reader, perm fs.FileMode) error {
	if err := mkdirNoFollow(filepath.Dir(to)); err != nil {
		return err
	}
	f, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, perm|0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	return errors.Join(err, f.Close())
}

// MountWorkspace makes dir a tmpfs of size bytes, so that the disk limit
// holds for what the sandbox writes there. It returns false (and leaves
// dir a plain directory) where mounting is not allowed; Unmount undoes it.
func MountWorkspace(dir string, size int64) bool {
	err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size="+strconv.FormatInt(size, 10)+",mode=0755")
	return err == nil
}

// Unmount unmounts a MountWorkspace tmpfs (lazily, so that a process
// still holding it cannot block the cleanup).
func Unmount(dir string) error {
	if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("unmount %s: %w", dir, err)
	}
	return nil
}

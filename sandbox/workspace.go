package sandbox

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"
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

// IsHidden reports whether rel (slash-separated) is or lies under one of
// hidden.
func IsHidden(rel string, hidden []string) bool {
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
		if IsHidden(rel, hidden) {
			if pristine == "" {
				return ""
			}
			return filepath.Join(pristine, filepath.FromSlash(rel))
		}
		return filepath.Join(ws, filepath.FromSlash(rel))
	}
	if fi.IsDir() {
		return copyTree(context.Background(), src, put, CopyBounds{})
	}
	return extractTar(src, put)
}

// CopyTree copies the tree at src into dst (an existing directory),
// leaving out the paths skip reports (slash-separated, relative). Files,
// directories and symlinks (as links, never followed) are copied; other
// kinds (FIFOs, sockets, devices) are left out.
func CopyTree(src, dst string, skip func(rel string) bool) error {
	return copyTree(context.Background(), src, skipper(dst, skip), CopyBounds{})
}

// CopyBounds bound a copy of a tree an agent wrote (CopyWorkspace); a zero
// field is no bound.
type CopyBounds struct {
	// MaxBytes bounds the regular files' sizes together (their apparent
	// sizes: a sparse file counts whole).
	MaxBytes int64
	// MaxFiles bounds the entries of every kind.
	MaxFiles int
	// Timeout bounds the whole copy.
	Timeout time.Duration
}

// Copy limits (CopyLimitError.Limit).
const (
	CopyLimitBytes = "size"
	CopyLimitFiles = "files"
	CopyLimitTime  = "time"
)

// CopyLimitError is a copy refused at one of its CopyBounds.
type CopyLimitError struct {
	// Limit is CopyLimitBytes, CopyLimitFiles or CopyLimitTime.
	Limit string
	// Path is where the copy was when it stopped (slash-separated,
	// relative to the tree).
	Path string
	// Bound is the bound passed, in its unit (bytes, entries, seconds).
	Bound float64
}

func (e *CopyLimitError) Error() string {
	switch e.Limit {
	case CopyLimitBytes:
		return fmt.Sprintf("the files hold more than %.0f bytes (at %s)", e.Bound, e.Path)
	case CopyLimitFiles:
		return fmt.Sprintf("more than %.0f files and directories (at %s)", e.Bound, e.Path)
	}
	return fmt.Sprintf("copying took longer than %gs (at %s)", e.Bound, e.Path)
}

// CopyWorkspace is CopyTree within bounds, for a tree an agent wrote: past
// a bound it stops with a *CopyLimitError (dst then holds part of the tree).
// A file is opened without following links and without blocking, and
// copied only if it is still a regular file, so that a FIFO or a link put
// in a file's place can neither hang the copy nor lead it outside src.
func CopyWorkspace(ctx context.Context, src, dst string, skip func(rel string) bool, b CopyBounds) error {
	if b.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.Timeout)
		defer cancel()
	}
	return copyTree(ctx, src, skipper(dst, skip), b)
}

func skipper(dst string, skip func(rel string) bool) func(rel string) string {
	return func(rel string) string {
		if skip != nil && skip(rel) {
			return ""
		}
		return filepath.Join(dst, filepath.FromSlash(rel))
	}
}

// copyTree copies the tree at src to the paths put gives (the entries put
// gives "" for are left out, a directory with all it holds), within b.
func copyTree(ctx context.Context, src string, put func(rel string) string, b CopyBounds) error {
	w := &treeCopy{ctx: ctx, put: put, b: b}
	if err := w.dir(src, ""); err != nil {
		if errors.Is(err, context.DeadlineExceeded) && b.Timeout > 0 {
			return &CopyLimitError{Limit: CopyLimitTime, Path: w.at, Bound: b.Timeout.Seconds()}
		}
		return err
	}
	return nil
}

type treeCopy struct {
	ctx   context.Context
	put   func(rel string) string
	b     CopyBounds
	files int
	bytes int64
	at    string // the entry being copied
}

// dir copies the entries of the directory p (rel to the tree), reading
// them a batch at a time (a directory may hold millions).
func (w *treeCopy) dir(p, rel string) error {
	flags := os.O_RDONLY | syscall.O_DIRECTORY
	if rel != "" {
		flags |= oNoFollow // the tree's root may be a link; nothing below it is followed
	}
	f, err := os.OpenFile(p, flags, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		des, err := f.ReadDir(512)
		for _, d := range des {
			if err := w.entry(filepath.Join(p, d.Name()), path.Join(rel, d.Name()), d); err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (w *treeCopy) entry(p, rel string, d fs.DirEntry) error {
	w.at = rel
	if err := w.ctx.Err(); err != nil {
		return err
	}
	if w.files++; w.b.MaxFiles > 0 && w.files > w.b.MaxFiles {
		return &CopyLimitError{Limit: CopyLimitFiles, Path: rel, Bound: float64(w.b.MaxFiles)}
	}
	to := w.put(rel)
	if to == "" {
		return nil
	}
	switch {
	case d.IsDir():
		if err := mkdirNoFollow(to); err != nil {
			return err
		}
		return w.dir(p, rel)
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
		return w.file(p, rel, to)
	}
	return nil
}

func (w *treeCopy) file(p, rel, to string) error {
	f, err := os.OpenFile(p, os.O_RDONLY|oNoFollow|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil // replaced since it was listed
	}
	if w.bytes += fi.Size(); w.b.MaxBytes > 0 && w.bytes > w.b.MaxBytes {
		return &CopyLimitError{Limit: CopyLimitBytes, Path: rel, Bound: float64(w.b.MaxBytes)}
	}
	// At most the size seen: a file that grows meanwhile cannot take the
	// copy past its bound.
	return writeFile(to, &ctxReader{ctx: w.ctx, r: io.LimitReader(f, fi.Size())}, fi.Mode().Perm())
}

// ctxReader reads r until ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
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
	return found, copyTree(context.Background(), pristine, func(rel string) string { return filepath.Join(dir, filepath.FromSlash(rel)) }, CopyBounds{})
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
	f, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL|oNoFollow, perm|0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	return errors.Join(err, f.Close())
}

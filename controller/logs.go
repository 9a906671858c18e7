package controller

import (
	"context"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"

	"github.com/aglrl/agl/store"
)

// redact replaces the attempt's secrets (its scoped key, the admin key)
// and anything shaped like a scoped key in s with "[REDACTED]".
func (a *attempt) redact(s string) string {
	for _, k := range a.secrets {
		if k != "" {
			s = strings.ReplaceAll(s, k, redacted)
		}
	}
	return scopedKeyRE.ReplaceAllString(s, redacted)
}

const redacted = "[REDACTED]"

// scopedKeyRE matches a scoped key (store.NewKey: the prefix and 43
// base64url characters), whichever attempt it belongs to.
var scopedKeyRE = regexp.MustCompile(regexp.QuoteMeta(store.KeyPrefix) + `[A-Za-z0-9_-]{16,}`)

// logData is the data of the "log" events the controller appends.
type logData struct {
	Stream    string `json:"stream"`
	Text      string `json:"text"`
	Bytes     int64  `json:"bytes"`
	Truncated bool   `json:"truncated,omitempty"`
}

// appendLogs appends the stdout and stderr tails (those not empty) as one
// "log" event each (appendTails).
func (c *runner) appendLogs(ctx context.Context, a *attempt) {
	var logs []Log
	for _, s := range []struct{ name, path string }{{"stdout", a.outPath}, {"stderr", a.errPath}} {
		fi, err := os.Stat(s.path)
		if err != nil || fi.Size() == 0 {
			continue
		}
		// Read a margin more than kept, so that a key the tail's start
		// would cut in two is still whole when redacted.
		logs = append(logs, Log{Stream: s.name, Text: readTail(s.path, c.cfg.LogTailBytes+a.margin()),
			Bytes: fi.Size(), Truncated: fi.Size() > int64(c.cfg.LogTailBytes)})
	}
	c.appendTails(ctx, a, logs)
}

// margin is the longest secret the attempt redacts.
func (a *attempt) margin() int {
	n := len(store.KeyPrefix) + 64
	for _, k := range a.secrets {
		n = max(n, len(k))
	}
	return n
}

// runeStart drops the bytes of a rune cut at the start of s.
func runeStart(s string) string {
	for i := 0; i < len(s) && i < 4; i++ {
		if s[i]&0xC0 != 0x80 {
			return s[i:]
		}
	}
	return s
}

// readTail returns up to n last bytes of a file.
func readTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-int64(n), 0)
	b, _ := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	if off > 0 {
		// Start at a rune boundary.
		for i := 0; i < len(b) && i < 4; i++ {
			if b[i]&0xC0 != 0x80 {
				b = b[i:]
				break
			}
		}
	}
	return string(b)
}

// lastLine returns the last non-blank line of s, trimmed and bounded.
func lastLine(s string) string {
	s = strings.TrimRight(s, " \t\r\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return truncate(strings.TrimSpace(s), 300)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// limitedWriter keeps the first n bytes and discards the rest.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

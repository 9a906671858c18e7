package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrJournalDamaged is wrapped by the JournalError that Open returns for
// an event journal it cannot account for.
var ErrJournalDamaged = errors.New("event journal needs recovery")

// JournalError is Open's refusal of a damaged or missing event journal:
// the file, the offset of the damage and why. Recover deals with it.
type JournalError struct {
	Path   string
	Offset int64
	Reason string
}

func (e *JournalError) Error() string {
	return fmt.Sprintf("sqlite store: event journal %s, offset %d: %s; refusing to open it (nothing was changed): run `%s` to keep every intact record and report what is lost",
		e.Path, e.Offset, e.Reason, RecoverCommand(strings.TrimSuffix(e.Path, "-events")))
}

func (e *JournalError) Unwrap() error { return ErrJournalDamaged }

// RecoverCommand is the command line that recovers the store at path.
func RecoverCommand(path string) string {
	if filepath.Base(path) == "agl.db" {
		return "agl store recover --data-dir " + filepath.Dir(path)
	}
	return "agl store recover --store sqlite:" + path
}

// Lost is a byte range of the event journal that was not replayed.
type Lost struct {
	Offset, Length int64
	Reason         string
}

// Recovery is what Recover did: the intact records (and their events)
// replayed from the journal, the byte ranges dropped, and notes on what
// could not be counted (a missing or truncated journal).
type Recovery struct {
	Journal         string
	Records, Events int
	Lost            []Lost
	Notes           []string
}

func (r *Recovery) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

func (r *Recovery) lose(l ...Lost) { r.Lost = append(r.Lost, l...) }

// Recover opens the store at path as Open does, except that an event
// journal Open would refuse is recovered: every intact record past what
// SQLite holds is applied (after damage, reading goes on at the next
// intact record), the rest is reported in the Recovery, and the journal
// starts a new generation, so that Open works afterwards. It takes the
// data dir's lock like any writer. With synchronous=FULL it does the same
// to a journal an earlier run left.
func Recover(ctx context.Context, path string, opt Options) (Recovery, error) {
	rec := Recovery{Journal: path + "-events"}
	if _, err := os.Stat(path); err != nil {
		return rec, fmt.Errorf("sqlite store: recover %s: %w", path, err)
	}
	opt.recover = &rec
	s, err := Open(ctx, path, opt)
	if err != nil {
		return rec, err
	}
	return rec, s.Close()
}

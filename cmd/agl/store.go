package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/aglrl/agl/app"
	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/sqlite"
)

// runStoreRecover is `agl store recover`: it opens a SQLite store whose
// event journal a normal open refuses (damaged, missing, of an unknown
// generation): it keeps every intact journaled record, applies it,
// reports what was lost, and leaves the data dir openable. It takes the
// data dir's lock, so the gateway or trainer using it must be stopped.
func runStoreRecover(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	load := configFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	c, err := load()
	if err != nil {
		return fmt.Errorf("store recover: %w", err)
	}
	p, ok := c.StorePath()
	if !ok {
		return fmt.Errorf("store recover: the store is not SQLite (%s): nothing to recover", app.RedactURL(c.Store.URL))
	}
	rec, err := sqlite.Recover(ctx, p, sqlite.Options{Synchronous: c.Store.Synchronous, Logger: newLogger()})
	if err != nil {
		return fmt.Errorf("store recover: %w", err)
	}
	fmt.Fprintf(stdout, "agl store recover: %s: replayed %d intact journal records (%d events) from %s\n", p, rec.Records, rec.Events, rec.Journal)
	var lostBytes int64
	for _, l := range rec.Lost {
		lostBytes += l.Length
		fmt.Fprintf(stdout, "  lost: %d bytes at offset %d: %s\n", l.Length, l.Offset, l.Reason)
	}
	for _, n := range rec.Notes {
		fmt.Fprintf(stdout, "  note: %s\n", n)
	}
	if len(rec.Lost) == 0 && len(rec.Notes) == 0 {
		fmt.Fprintln(stdout, "  nothing was lost")
	} else {
		fmt.Fprintf(stdout, "  in all: %d damaged ranges, %d bytes not recovered, %d notes\n", len(rec.Lost), lostBytes, len(rec.Notes))
	}
	fmt.Fprintln(stdout, "  the data dir opens again")
	return nil
}

// runPrune deletes terminal rollouts (with their attempts and events) by
// age, trainer step or total size, and reclaims the space; --dry-run
// lists what would go. Running and queued rollouts are never pruned. On
// SQLite it takes the data dir's lock, so the gateway or trainer using it
// must be stopped.
func runPrune(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	load := configFlags(fs)
	olderThan := fs.String("older-than", "", "prune rollouts that ended longer ago than this (e.g. 72h, 30d)")
	beforeStep := fs.Int64("before-step", -1, "prune rollouts of trainer steps below this")
	maxBytes := fs.String("max-bytes", "", "then prune the oldest ended rollouts until the stored events take at most this (e.g. 20GB, 512MiB)")
	dryRun := fs.Bool("dry-run", false, "list what would be pruned, delete nothing")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	var f store.PruneFilter
	f.DryRun = *dryRun
	if *olderThan != "" {
		d, err := parseAge(*olderThan)
		if err != nil {
			return usagef("--older-than %q: %w", *olderThan, err)
		}
		f.OlderThan = time.Now().Add(-d)
	}
	if *beforeStep >= 0 {
		f.BeforeStep = beforeStep
	} else if *beforeStep != -1 {
		return usagef("--before-step %d is negative", *beforeStep)
	}
	if *maxBytes != "" {
		n, err := parseBytes(*maxBytes)
		if err != nil {
			return usagef("--max-bytes %q: %w", *maxBytes, err)
		}
		f.MaxBytes = n
	}
	if !f.Set() {
		return usagef("say what to prune: --older-than, --before-step or --max-bytes")
	}
	c, err := load()
	if err != nil {
		return fmt.Errorf("store prune: %w", err)
	}
	st, err := app.OpenStore(ctx, c.Config, newLogger(), nil)
	if err != nil {
		return fmt.Errorf("store prune: %w", err)
	}
	defer st.Close()
	p, ok := st.(store.Pruner)
	if !ok {
		return fmt.Errorf("store prune: this store cannot prune")
	}
	res, err := p.Prune(ctx, f)
	if err != nil {
		return fmt.Errorf("store prune: %w", err)
	}
	verb := "pruned"
	if f.DryRun {
		verb = "would prune"
	}
	for _, r := range res.Rollouts {
		step := "-"
		if r.Step != nil {
			step = strconv.FormatInt(*r.Step, 10)
		}
		fmt.Fprintf(stdout, "%s %s\t%s\tstep %s\tended %s\t%d events\t%s\n", verb, r.ID, r.Status, step, r.EndedAt.Format(time.RFC3339), r.Events, fmtBytes(r.Bytes))
	}
	fmt.Fprintf(stdout, "agl store prune: %s %d rollouts (%s of events), %s of events kept", verb, len(res.Rollouts), fmtBytes(res.Bytes), fmtBytes(res.Kept))
	if !f.DryRun {
		fmt.Fprintf(stdout, "; store files %s -> %s", fmtBytes(res.FileBytesBefore), fmtBytes(res.FileBytesAfter))
	}
	fmt.Fprintln(stdout)
	return nil
}

// parseAge reads a Go duration, or a number of days ("30d").
func parseAge(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(d, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("want a duration like 72h or 30d")
		}
		return time.Duration(n * float64(24*time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("want a duration like 72h or 30d")
	}
	return d, nil
}

// parseBytes reads a size: a number of bytes with an optional unit (KB,
// MB, GB, TB powers of 1000; KiB, MiB, GiB, TiB of 1024).
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mul    float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	num, mul := strings.TrimSpace(s), 1.0
	for _, u := range units {
		if v, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mul = strings.TrimSpace(v), u.mul
			break
		}
	}
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || n < 1 || n*mul > 1<<62 {
		return 0, fmt.Errorf("want a positive size like 20GB or 512MiB")
	}
	return int64(n * mul), nil
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

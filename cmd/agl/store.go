package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/aglrl/agl/store/sqlite"
)

// runStore runs the store maintenance subcommands:
//
//	agl store recover --data-dir DIR
//
// recover opens a SQLite store whose event journal a normal open refuses
// (damaged, missing, of an unknown generation): it keeps every intact
// journaled record, applies it, reports what was lost, and leaves the
// data dir openable. It takes the data dir's lock, so the gateway or
// trainer using it must be stopped.
func runStore(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("store recover", flag.ContinueOnError)
	load := configFlags(fs)
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
		return fs.Parse(args[:1]) // the flags of recover, the only subcommand
	}
	if len(args) == 0 || args[0] != "recover" {
		return fmt.Errorf("store: want a subcommand: recover")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("store recover: unexpected arguments %q", fs.Args())
	}
	c, err := load()
	if err != nil {
		return fmt.Errorf("store recover: %w", err)
	}
	p, ok := c.StorePath()
	if !ok {
		return fmt.Errorf("store recover: the store is not SQLite (%s): nothing to recover", redactURL(c.Store.URL))
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

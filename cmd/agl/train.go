package main

import (
	"context"
	"flag"
	"io"

	"github.com/aglrl/agl/app"
)

func runTrain(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	dataDir := fs.String("data-dir", "", "where the store, checkpoint, metrics and curve go (default: the config's data_dir)")
	resume := fs.Bool("resume", false, "continue from the data dir's last checkpoint")
	steps := fs.Int("steps", 0, "override trainer.steps")
	listen := fs.String("listen", "", "address of the in-process gateway, its dashboard and /metrics (default: gateway.listen, else a free loopback port)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("want one config file: agl train CONFIG")
	}
	// Flags may follow the config too (the examples' run.sh pass theirs
	// after it).
	cfgPath := fs.Arg(0)
	if err := parseFlags(fs, fs.Args()[1:]); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("want one config file: agl train CONFIG (got also %q)", fs.Args())
	}
	c, err := app.Load(cfgPath)
	if err != nil {
		return err
	}
	if *dataDir != "" {
		c.DataDir = *dataDir
	}
	if *steps > 0 {
		c.Trainer.Steps = *steps
	}
	return app.Train(ctx, c, app.TrainOptions{Options: app.Options{Logger: newLogger(), Version: version()}, Resume: *resume, Listen: *listen, Stdout: stdout})
}

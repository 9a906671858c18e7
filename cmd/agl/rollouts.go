package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

// clientFlags registers --gateway and returns a function making the client.
func clientFlags(fs *flag.FlagSet) func() *api.Client {
	def := os.Getenv("AGL_GATEWAY_URL")
	if def == "" {
		def = "http://127.0.0.1:8080"
	}
	url := fs.String("gateway", def, "gateway URL (env AGL_GATEWAY_URL); the key comes from AGL_ADMIN_KEY")
	return func() *api.Client { return api.NewClient(*url, os.Getenv("AGL_ADMIN_KEY")) }
}

// runRolloutsList is `agl rollouts ls`.
func runRolloutsList(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	client := clientFlags(fs)
	status := fs.String("status", "", "comma-separated statuses")
	group := fs.String("group", "", "group id")
	mode := fs.String("mode", "", "train or val")
	limit := fs.Int("limit", 50, "rows")
	asc := fs.Bool("oldest", false, "oldest first (default newest first)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	f := store.RolloutFilter{GroupID: *group, Mode: store.Mode(*mode), Limit: *limit, Desc: !*asc}
	if *status != "" {
		for _, s := range strings.Split(*status, ",") {
			f.Status = append(f.Status, store.RolloutStatus(s))
		}
	}
	page, err := client().ListRollouts(ctx, f)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tGROUP\tMODE\tSTATUS\tATTEMPTS\tREWARD\tUPDATED\tERROR")
	for _, r := range page.Rollouts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", r.ID, dash(r.GroupID), r.Mode, r.Status, r.NumAttempts,
			r.Config.MaxAttempts, reward(r.Reward), r.UpdatedAt.Local().Format(time.DateTime), trunc(r.Error, 40))
	}
	if page.NextCursor != 0 {
		fmt.Fprintf(tw, "… more (cursor %d)\n", page.NextCursor)
	}
	return tw.Flush()
}

// runRolloutsShow is `agl rollouts show ID`.
func runRolloutsShow(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	client := clientFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want one rollout id, got %d arguments", fs.NArg())
	}
	r, err := client().GetRollout(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\ngroup\t%s\nmode\t%s\nstatus\t%s\nreward\t%s\ncreated\t%s\nupdated\t%s\n", r.ID, dash(r.GroupID), r.Mode,
		r.Status, reward(r.Reward), r.CreatedAt.Local().Format(time.DateTime), r.UpdatedAt.Local().Format(time.DateTime))
	fmt.Fprintf(tw, "config\ttimeout %gs, max attempts %d, unresponsive after %gs\n", r.Config.TimeoutSeconds, r.Config.MaxAttempts, r.Config.UnresponsiveSeconds)
	if r.Error != "" {
		fmt.Fprintf(tw, "error\t%s\n", r.Error)
	}
	fmt.Fprintf(tw, "task\t%s\n", trunc(string(r.Task), 200))
	tw.Flush()
	fmt.Fprintln(stdout, "\nATTEMPTS")
	tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tID\tWORKER\tSTATUS\tSTARTED\tDURATION\tERROR")
	for _, a := range r.Attempts {
		end := time.Now()
		if a.EndedAt != nil {
			end = *a.EndedAt
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Number, a.ID, dash(a.WorkerID), a.Status,
			a.StartedAt.Local().Format(time.DateTime), end.Sub(a.StartedAt).Round(time.Millisecond), trunc(a.Error, 60))
	}
	return tw.Flush()
}

// runRolloutsEvents is `agl rollouts events ID`.
func runRolloutsEvents(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	client := clientFlags(fs)
	typ := fs.String("type", "", "comma-separated event types")
	attempt := fs.String("attempt", "", "attempt id")
	full := fs.Bool("full", false, "print whole event data as JSON lines")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want one rollout id, got %d arguments", fs.NArg())
	}
	f := store.EventFilter{RolloutID: fs.Arg(0), AttemptID: *attempt}
	if *typ != "" {
		f.Types = strings.Split(*typ, ",")
	}
	evs, err := client().ListEvents(ctx, f)
	if err != nil {
		return err
	}
	if *full {
		enc := json.NewEncoder(stdout)
		for _, e := range evs {
			if err := enc.Encode(e); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tATTEMPT\tTYPE\tTIME\tDATA")
	for _, e := range evs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", e.Seq, e.AttemptID, e.Type, e.Time.Local().Format("15:04:05.000"), summarize(e))
	}
	return tw.Flush()
}

// summarize renders an event's data in one short cell.
func summarize(e store.Event) string {
	if e.Type == store.EventModelRequest {
		var mc api.ModelCall
		if json.Unmarshal(e.Data, &mc) == nil {
			if mc.Status == api.CallError {
				return fmt.Sprintf("%s %s: error, HTTP %d: %s", mc.API, mc.Model, mc.HTTPStatus, trunc(mc.Error, 80))
			}
			return fmt.Sprintf("%s %s v%d: %d prompt + %d response tokens, %s, %.1fms", mc.API, mc.Model, mc.ModelVersion,
				len(mc.PromptIDs), len(mc.ResponseIDs), dash(mc.FinishReason), mc.LatencyMS)
		}
	}
	return trunc(string(e.Data), 100)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func reward(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.3g", *r)
}

func trunc(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

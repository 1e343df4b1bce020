package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/jobgate/jobgate/frontend/wire"
)

func runJobsGet(args []string, stdout, stderr io.Writer) error {
	c := newJobCommand("jobs get", "Prints one job (get_export or get_eval, whichever the handle names): status, progress,\n"+
		"its open input request, error or result.", stderr)
	return c.printJobRead(args, stdout, "print the job view as JSON (the get_* result, unchanged)",
		func(ctx context.Context, cl *client, h string) (json.RawMessage, func(), error) {
			j, err := cl.getJob(ctx, h)
			if err != nil {
				return nil, nil, err
			}
			return j.raw, func() {
				printJob(stdout, j, cl.tenant(), time.Now())
				if more := cliKindOf(j.kind).printMore; more != nil {
					more(ctx, cl, stdout, j)
				}
			}, nil
		})
}

// terminal reports whether a job status is final.
func terminal(s string) bool {
	return s == "succeeded" || s == "failed" || s == "cancelled"
}

// isTTY reports whether w is a terminal (progress bars only then; plain lines otherwise).
func isTTY(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// watchRetries is how many polls in a row may fail transiently (unavailable, a dropped
// connection) before watch gives up.
const watchRetries = 8

func runJobsWatch(args []string, stdout, stderr io.Writer) error {
	var interval, timeout time.Duration
	c := newJobCommand("jobs watch", "Polls the job (get_*) until it succeeds, fails or is cancelled, honoring the server's\n"+
		"poll_after_ms. On a terminal: a progress bar; otherwise one line 'status done/total unit message'\n"+
		"whenever something changed. Exit status 0 if the job succeeded, 1 if it failed or was cancelled.", stderr)
	c.DurationVar(&interval, "interval", time.Second, "least time between polls (the server's poll_after_ms may ask for more)")
	c.DurationVar(&timeout, "timeout", 0, "give up after this long (0: never); the job goes on either way")
	c.jsonHelp("print the get_* result as one line of JSON (JSON Lines, unchanged) whenever status or progress changed")
	h, err := c.handle(args)
	if err != nil {
		return err
	}
	if interval < 100*time.Millisecond {
		return errors.New("jobs watch: --interval must be at least 100ms")
	}
	ctx, stop := untilInterrupted()
	defer stop()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	cl, err := c.conn.connect()
	if err != nil {
		return err
	}
	defer func() { _ = cl.Close() }()

	j, err := cl.getJob(ctx, h)
	if err != nil {
		return err
	}
	var out watchOutput = &plainWatch{w: stdout}
	switch {
	case c.asJSON:
		out = &jsonWatch{w: stdout, raw: &j.raw}
	case isTTY(stdout):
		out = &barWatch{w: stdout}
	}
	failures := 0
	for {
		out.update(&j.view)
		if terminal(string(j.view.Status)) {
			break
		}
		wait := max(interval, time.Duration(j.view.PollAfterMS)*time.Millisecond)
		if failures > 0 {
			wait = max(wait, min(time.Duration(1<<failures)*time.Second, 30*time.Second))
		}
		select {
		case <-ctx.Done():
			out.stop()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return &exitError{code: 1, err: fmt.Errorf("jobs watch: gave up after %s; the job is still %s and goes on", timeout, j.view.Status)}
			}
			return &exitError{code: 130, err: errors.New("stopped watching; the job goes on (watch again with the same handle)")}
		case <-time.After(wait):
		}
		// Each view carries a fresh handle: polling with it keeps a long watch from outliving
		// the first handle's expiry.
		var next wire.JobView
		raw, err := cl.call(ctx, "get_"+j.kind, map[string]any{"handle": j.view.Handle}, &next)
		if err != nil {
			var te *wire.ToolError
			retryable := !errors.As(err, &te) || te.Retryable
			if ctx.Err() != nil {
				continue // reported at the top of the next wait
			}
			if !retryable || failures >= watchRetries {
				out.stop()
				return err
			}
			failures++
			out.note(fmt.Sprintf("poll failed (%v); retrying", err), stderr)
			if te == nil {
				// A transport error: start a fresh session (the server keeps none; this is only
				// the client's connection).
				if nc, cerr := c.conn.connect(); cerr == nil {
					_ = cl.Close()
					cl = nc
				}
			}
			continue
		}
		failures = 0
		j.view, j.raw = next, raw
	}
	out.finish(&j.view)
	v := &j.view
	switch v.Status {
	case "succeeded":
		if cliKindOf(j.kind).download {
			fmt.Fprintf(c.info(stdout), "download: jobgate jobs download %s\n", v.Handle)
		}
		return nil
	}
	code, msg := string(v.Status), "no reason given"
	if v.Error != nil {
		code, msg = clean(v.Error.Code), clean(v.Error.Message)
	}
	return &exitError{code: 1, err: fmt.Errorf("%s job %s %s: %s: %s", j.kind, clean(v.JobID), v.Status, code, msg)}
}

// watchOutput shows a watched job's progress.
type watchOutput interface {
	update(v *wire.JobView) // a poll's view
	note(msg string, stderr io.Writer)
	finish(v *wire.JobView) // the job reached a terminal status
	stop()                  // watching ends before that
}

// plainWatch prints one line per change: "status done/total unit message".
type plainWatch struct {
	w        io.Writer
	last     string
	inputIDs map[string]bool
}

func (p *plainWatch) update(v *wire.JobView) {
	line := string(v.Status) + " " + progressText(v)
	if v.Progress.Message != "" {
		line += " " + oneLine(v.Progress.Message)
	}
	if line != p.last {
		fmt.Fprintln(p.w, line)
		p.last = line
	}
	if ni := v.NeedsInput; ni != nil && !p.inputIDs[ni.InputID] {
		if p.inputIDs == nil {
			p.inputIDs = map[string]bool{}
		}
		p.inputIDs[ni.InputID] = true
		fmt.Fprintf(p.w, "  waiting for %s: %s\n", approverText(ni), oneLine(ni.Prompt))
	}
}

func (p *plainWatch) note(msg string, stderr io.Writer) { fmt.Fprintln(stderr, oneLine(msg)) }

func (p *plainWatch) finish(v *wire.JobView) {
	if v.Error != nil {
		fmt.Fprintf(p.w, "  %s: %s\n", oneLine(v.Error.Code), oneLine(v.Error.Message))
	}
}

func (p *plainWatch) stop() {}

// jsonWatch prints, whenever the plain line would change (status, progress, message, a new
// input request), the get_* result of that poll as one line of JSON (JSON Lines), unchanged.
type jsonWatch struct {
	w     io.Writer
	raw   *json.RawMessage // the current poll's result
	plain plainWatch
}

func (j *jsonWatch) update(v *wire.JobView) {
	var changed strings.Builder
	j.plain.w = &changed
	j.plain.update(v)
	if changed.Len() == 0 {
		return
	}
	var buf bytes.Buffer
	if json.Compact(&buf, *j.raw) == nil {
		buf.WriteByte('\n')
		_, _ = buf.WriteTo(j.w)
	}
}

func (j *jsonWatch) note(msg string, stderr io.Writer) { fmt.Fprintln(stderr, oneLine(msg)) }
func (j *jsonWatch) finish(*wire.JobView)              {}
func (j *jsonWatch) stop()                             {}

// barWatch draws a progress bar of progress.done out of progress.total (a spinner while the
// total is unknown), described by the status and message.
type barWatch struct {
	w    io.Writer
	bar  *progressbar.ProgressBar
	max  int64
	unit string // shown in the description when the rate (which names it) is not shown
}

func (b *barWatch) describe(v *wire.JobView) string {
	d := string(v.Status)
	msg := v.Progress.Message
	if v.NeedsInput != nil {
		msg = "waiting for " + approverText(v.NeedsInput)
	}
	if msg != "" {
		d += ": " + oneLine(msg)
	}
	if r := []rune(d); len(r) > 60 {
		d = string(r[:59]) + "…"
	}
	if b.unit != "" {
		d += " [" + b.unit + "]"
	}
	return d
}

func (b *barWatch) update(v *wire.JobView) {
	total := int64(v.Progress.Total)
	if total <= 0 {
		total = -1 // unknown: a spinner
	}
	if b.bar == nil {
		opts := []progressbar.Option{
			progressbar.OptionSetWriter(b.w),
			progressbar.OptionSetDescription(b.describe(v)),
			progressbar.OptionShowCount(),
			progressbar.OptionSetWidth(30),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetRenderBlankState(true),
			progressbar.OptionSpinnerType(14),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(b.w) }),
		}
		// Rate and ETA only when the bar starts from zero: attached to a job midway, the bar
		// would count the work done before as done in its first poll interval.
		u := oneLine(v.Progress.Unit)
		if v.Progress.Done == 0 {
			opts = append(opts, progressbar.OptionSetPredictTime(true))
			if u != "" {
				opts = append(opts, progressbar.OptionShowIts(), progressbar.OptionSetItsString(u))
			}
		} else {
			opts = append(opts, progressbar.OptionSetPredictTime(false))
			b.unit = u
		}
		b.bar = progressbar.NewOptions64(total, opts...)
		b.max = total
	}
	if total != b.max {
		b.bar.ChangeMax64(total)
		b.max = total
	}
	done := int64(v.Progress.Done)
	if total > 0 && done >= total {
		done = total - 1 // the bar completes in finish, once the job has
	}
	_ = b.bar.Set64(done)
	b.bar.Describe(b.describe(v))
}

func (b *barWatch) note(msg string, _ io.Writer) {
	if b.bar != nil {
		b.bar.Describe(oneLine(msg))
	}
}

func (b *barWatch) finish(v *wire.JobView) {
	if b.bar == nil {
		return
	}
	if v.Status == "succeeded" {
		if b.max <= 0 {
			b.bar.ChangeMax64(int64(max(v.Progress.Done, 1)))
		}
		_ = b.bar.Set64(int64(max(v.Progress.Done, 1)))
		_ = b.bar.Finish()
	} else {
		_ = b.bar.Exit()
		fmt.Fprintln(b.w)
	}
	fmt.Fprintf(b.w, "%s %s\n", v.Status, progressText(v))
	if v.Error != nil {
		fmt.Fprintf(b.w, "  %s: %s\n", oneLine(v.Error.Code), oneLine(v.Error.Message))
	}
}

func (b *barWatch) stop() {
	if b.bar != nil {
		_ = b.bar.Exit()
		fmt.Fprintln(b.w)
	}
}

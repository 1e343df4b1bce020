// Package replay is `jobgate replay`: it replays recent histories of every workflow type this
// binary registers, from a namespace, against the workflow code in the binary, before it is
// deployed (exit 1 names each execution it would break). It owns the replayer and its
// reporting; the Temporal connection, flags' environment variables and logger are cmd/app's.
// It must never import frontend: a replay needs workflow code only.
package replay

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/activities/payloadcrypt"
	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/workflows"
)

// ErrReplayFailed is what Replay returns when any history did not replay (exit status 1).
var ErrReplayFailed = errors.New("replay: workflow code in this binary is not compatible with recorded histories")

// ReplaySampleDefault is ReplayConfig.Sample when left zero.
const ReplaySampleDefault = 20

// ReplayConfig configures `jobgate replay`.
type ReplayConfig struct {
	Address, Namespace string
	TLS                app.TemporalTLS
	// Sample is how many of the newest open and of the newest closed executions of each
	// workflow type are replayed. Defaults to ReplaySampleDefault.
	Sample int
	// Query is a visibility filter ANDed to every listing. Defaults to none.
	Query string
	// Since limits closed executions to those closed since then (open ones are always
	// candidates: every one of them meets the new code). Zero: no limit.
	Since time.Time
	// JSON prints one JSON document instead of lines.
	JSON bool
	// Timeout bounds the whole run; DialTimeout how long Temporal may take to answer first.
	Timeout, DialTimeout time.Duration
	// Payloads and Artifacts find the payload keys (serve's and worker's flags): replay
	// decodes each history's inputs and markers with them. None (Replay called in code):
	// histories must be clear; RunReplay requires them, as serve and worker do.
	Payloads  payloadcrypt.Config
	Artifacts string
}

// sinceFlag reads --since as a duration back from now ("72h") or an RFC 3339 time.
type sinceFlag struct{ t *time.Time }

func (f sinceFlag) String() string {
	if f.t == nil || f.t.IsZero() {
		return ""
	}
	return f.t.Format(time.RFC3339)
}

func (f sinceFlag) Set(v string) error {
	if d, err := time.ParseDuration(v); err == nil {
		if d <= 0 {
			return fmt.Errorf("--since %q: want a positive duration or an RFC 3339 time", v)
		}
		*f.t = time.Now().Add(-d)
		return nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return fmt.Errorf("--since %q: want a duration (72h) or an RFC 3339 time (2026-11-30T00:00:00Z)", v)
	}
	*f.t = t
	return nil
}

// Flags registers replay's flags (the connection flags are serve's, worker's and setup's).
func (c *ReplayConfig) Flags(fs *flag.FlagSet) {
	app.ConnectionFlags(fs, &c.Address, &c.Namespace, &c.TLS)
	fs.IntVar(&c.Sample, "sample", ReplaySampleDefault, "replay up to this many of the newest open and of the newest closed executions of each workflow type")
	fs.StringVar(&c.Query, "query", "", "visibility filter ANDed to every listing, e.g. \"JobTenant = 'acme'\"")
	fs.Var(sinceFlag{&c.Since}, "since", "only closed executions closed since: a duration back from now (72h) or an RFC 3339 time; open ones are always replayed")
	fs.BoolVar(&c.JSON, "json", false, "print one JSON document (results and summary) instead of lines")
	fs.DurationVar(&c.Timeout, "timeout", 10*time.Minute, "give up after this long")
	fs.DurationVar(&c.DialTimeout, "dial-timeout", 30*time.Second, "how long Temporal may take to answer at first")
	c.Payloads.Flags(fs)
	fs.StringVar(&c.Artifacts, "artifacts", "", "the artifact store serve and worker have (its keys/ prefix is the default payload key store)")
}

// ReplayResult is one execution's outcome.
type ReplayResult struct {
	WorkflowType string `json:"workflow_type"`
	WorkflowID   string `json:"workflow_id"`
	RunID        string `json:"run_id"`
	Open         bool   `json:"open"`
	Events       int    `json:"events,omitempty"`
	// Status is "ok", "failed" (did not replay: Error says why, EventID/EventType where), or
	// "not_fetched" (the history could not be read, e.g. deleted meanwhile; not a failure).
	Status    string `json:"status"`
	EventID   int64  `json:"event_id,omitempty"`
	EventType string `json:"event_type,omitempty"`
	Error     string `json:"error,omitempty"`
}

// ReplaySummary counts the results.
type ReplaySummary struct {
	Namespace  string `json:"namespace"`
	Replayed   int    `json:"replayed"`
	OK         int    `json:"ok"`
	Failed     int    `json:"failed"`
	NotFetched int    `json:"not_fetched"`
}

// replayTarget is one listing: a workflow type this binary registers and the visibility
// query that finds its executions.
type replayTarget struct{ workflowType, query string }

// replayRegistry lets a WorkflowReplayer take a kind's registration (workflows.Kind.Register,
// workflows.RegisterNotify): the same calls a worker makes, so replay checks exactly the
// workflow functions and options a worker runs. Replay executes no activity.
type replayRegistry struct{ worker.WorkflowReplayer }

func (replayRegistry) RegisterActivityWithOptions(any, activity.RegisterOptions) {}

// newReplayer registers every workflow a worker of every kind registers and returns the
// listings that find their executions: a kind's workflow by its JobKind search attribute, its
// auxiliary workflows and the notification workflow (which carry no JobKind) by type.
func newReplayer(dc converter.DataConverter, fc converter.FailureConverter) (worker.WorkflowReplayer, []replayTarget, error) {
	// Logging in replay on: replay_locate.go reads the SDK's per-event log to name the event
	// that diverged (everything else the replay logs is dropped).
	o := worker.WorkflowReplayerOptions{EnableLoggingInReplay: true, DataConverter: dc, FailureConverter: fc}
	if dc != nil {
		// As the workers have it: a cancelled run's close would otherwise encode details no
		// tenant can seal (payloadcrypt.WorkerInterceptor).
		o.Interceptors = []interceptor.WorkerInterceptor{payloadcrypt.WorkerInterceptor()}
	}
	r, err := worker.NewWorkflowReplayerWithOptions(o)
	if err != nil {
		return nil, nil, err
	}
	reg := replayRegistry{r}
	var targets []replayTarget
	for _, k := range workflows.Kinds() {
		// Empty Workflows: no seal is opened on replay (validators do not run) and a
		// notification's "wanted?" answer is read from its recorded side effect.
		names, _, err := k.Register(reg, &workflows.Workflows{}, &activities.Activities{})
		if err != nil {
			return nil, nil, err
		}
		for _, n := range names {
			q := fmt.Sprintf("WorkflowType = '%s'", n)
			if n == k.WorkflowName {
				q = fmt.Sprintf("%s = '%s'", workflows.SAJobKind.GetName(), k.Name)
			}
			targets = append(targets, replayTarget{n, q})
		}
	}
	workflows.RegisterNotify(reg, &activities.Notifier{})
	for _, n := range []string{workflows.NotifyWorkflowName, workflows.NotifyProgressWorkflowName} {
		targets = append(targets, replayTarget{n, fmt.Sprintf("WorkflowType = '%s'", n)})
	}
	return r, targets, nil
}

// Replay lists recent executions of every workflow type this binary registers, replays each
// history against this binary's workflow code, prints one line per execution and a summary to
// out, and returns ErrReplayFailed if any did not replay. Histories it cannot read are
// reported, not failed. Other errors (connection, a query the server refuses) are returned.
func Replay(ctx context.Context, c ReplayConfig, log *zap.Logger, out io.Writer) (ReplaySummary, error) {
	if log == nil {
		log = zap.NewNop()
	}
	sum := ReplaySummary{Namespace: c.Namespace}
	if c.Sample <= 0 {
		c.Sample = ReplaySampleDefault
	}
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	// Encrypted histories replay only with the keys: the workflow's input and its markers
	// are payloads. Clear ones replay either way.
	var dc converter.DataConverter
	var fc converter.FailureConverter
	if c.Payloads.Enabled() {
		keys, err := c.Payloads.Open(ctx, c.Artifacts, payloadcrypt.Options{})
		if err != nil {
			return sum, err
		}
		defer keys.Close()
		dc = payloadcrypt.NewDataConverter(keys.Store)
		fc = payloadcrypt.NewFailureConverter(dc)
	}
	replayer, targets, err := newReplayer(dc, fc)
	if err != nil {
		return sum, err
	}
	dctx, dcancel := context.WithTimeout(ctx, max(c.DialTimeout, time.Second))
	tc, _, err := app.DialTemporal(dctx, c.Address, c.Namespace, c.TLS, log)
	dcancel()
	if err != nil {
		return sum, err
	}
	defer tc.Close()

	var results []ReplayResult
	seen := map[string]bool{}
	for _, tg := range targets {
		execs, err := listForReplay(ctx, tc, c, tg)
		if err != nil {
			return sum, err
		}
		for _, ex := range execs {
			key := ex.WorkflowID + "\x00" + ex.RunID
			if seen[key] {
				continue
			}
			seen[key] = true
			res := replayOne(ctx, tc, replayer, ex)
			results = append(results, res)
			sum.Replayed++
			switch res.Status {
			case "ok":
				sum.OK++
			case "failed":
				sum.Failed++
			default:
				sum.NotFetched++
			}
			if !c.JSON {
				fmt.Fprintln(out, res.line())
			}
		}
	}
	if c.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if results == nil {
			results = []ReplayResult{}
		}
		if err := enc.Encode(struct {
			Results []ReplayResult `json:"results"`
			Summary ReplaySummary  `json:"summary"`
		}{results, sum}); err != nil {
			return sum, err
		}
	} else {
		fmt.Fprintf(out, "replay: %d executions of namespace %s: %d ok, %d failed, %d not fetched\n",
			sum.Replayed, sum.Namespace, sum.OK, sum.Failed, sum.NotFetched)
	}
	if sum.Failed > 0 {
		return sum, ErrReplayFailed
	}
	return sum, nil
}

// line is the result as one line: grep-able in CI logs (FAIL, then workflow ID and run).
func (r ReplayResult) line() string {
	state := "closed"
	if r.Open {
		state = "open"
	}
	switch r.Status {
	case "ok":
		return fmt.Sprintf("ok    %s %s run %s (%s, %d events)", r.WorkflowType, r.WorkflowID, r.RunID, state, r.Events)
	case "failed":
		where := "no event located"
		if r.EventID > 0 {
			where = fmt.Sprintf("event %d %s", r.EventID, r.EventType)
		}
		return fmt.Sprintf("FAIL  %s %s run %s (%s): diverged at %s: %s", r.WorkflowType, r.WorkflowID, r.RunID, state,
			where, oneLine(r.Error))
	}
	return fmt.Sprintf("SKIP  %s %s run %s (%s): history not fetched: %s", r.WorkflowType, r.WorkflowID, r.RunID, state, oneLine(r.Error))
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// listForReplay lists up to c.Sample open and c.Sample closed executions of the target, newest
// first as the server orders them.
func listForReplay(ctx context.Context, tc client.Client, c ReplayConfig, tg replayTarget) ([]ReplayResult, error) {
	var out []ReplayResult
	for _, open := range []bool{true, false} {
		q := "(" + tg.query + ")"
		if open {
			q += " AND ExecutionStatus = 'Running'"
		} else {
			q += " AND ExecutionStatus != 'Running'"
			if !c.Since.IsZero() {
				q += fmt.Sprintf(" AND CloseTime >= '%s'", c.Since.UTC().Format(time.RFC3339))
			}
		}
		if c.Query != "" {
			q += " AND (" + c.Query + ")"
		}
		var token []byte
		n := 0
		for n < c.Sample {
			resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: c.Namespace,
				Query: q, PageSize: int32(c.Sample - n), NextPageToken: token})
			if err != nil {
				return nil, fmt.Errorf("list %s executions (query %q): %w", tg.workflowType, q, err)
			}
			for _, e := range resp.GetExecutions() {
				if n == c.Sample {
					break
				}
				n++
				out = append(out, ReplayResult{WorkflowType: e.GetType().GetName(), WorkflowID: e.GetExecution().GetWorkflowId(),
					RunID: e.GetExecution().GetRunId(), Open: open})
			}
			if token = resp.GetNextPageToken(); len(token) == 0 {
				break
			}
		}
	}
	return out, nil
}

// replayOne fetches one execution's history and replays it; an open execution replays up to
// its last event.
func replayOne(ctx context.Context, tc client.Client, r worker.WorkflowReplayer, res ReplayResult) ReplayResult {
	hist, err := fetchHistory(ctx, tc, res.WorkflowID, res.RunID)
	if err != nil {
		res.Status, res.Error = "not_fetched", err.Error()
		return res
	}
	res.Events = len(hist.GetEvents())
	id, typ, err := replayLocated(r, hist, res.WorkflowID, res.RunID)
	if err == nil {
		res.Status = "ok"
		return res
	}
	res.Status, res.Error, res.EventID, res.EventType = "failed", err.Error(), id, typ
	return res
}

func fetchHistory(ctx context.Context, tc client.Client, id, runID string) (*historypb.History, error) {
	it := tc.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			var nf *serviceerror.NotFound
			if errors.As(err, &nf) {
				return nil, fmt.Errorf("not found (deleted or past retention): %w", err)
			}
			return nil, err
		}
		h.Events = append(h.Events, ev)
	}
	if len(h.Events) == 0 {
		return nil, errors.New("empty history")
	}
	return h, nil
}

// RunReplay is the `jobgate replay` command: flags (and their JOBGATE_* variables), then Replay.
func RunReplay(args []string, stdout, stderr io.Writer) error {
	var c ReplayConfig
	fs := app.CommandFlags("replay", "Usage: jobgate replay [flags]\n\nReplays recent histories of every jobgate workflow type in a namespace (open and\n"+
		"closed, by visibility query) against the workflow code in this binary, before it is\n"+
		"deployed. One line per execution; exit 0 all replayed, 1 any did not (non-determinism),\n"+
		"2 usage or connection error. Histories deleted meanwhile are reported, not failed.\n", stderr)
	c.Flags(fs)
	if err := app.BindEnv(fs); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("replay: unexpected arguments %q", fs.Args())
	}
	if c.Sample <= 0 {
		return fmt.Errorf("--sample %d: want at least 1", c.Sample)
	}
	if !c.Payloads.Enabled() {
		// serve and worker seal every payload: without the keys no history would replay, and
		// each would be reported as a divergence.
		return errors.New("--payload-kek or --payload-kek-file is required (the histories' payloads are encrypted): " +
			"give replay serve's and worker's key-encryption key and --artifacts (or --payload-key-store)")
	}
	log, err := app.NewLogger("console", zap.WarnLevel)
	if err != nil {
		return err
	}
	defer log.Sync()
	_, err = Replay(context.Background(), c, log, stdout)
	return err
}

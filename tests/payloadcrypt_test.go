package tests

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/activities/payloadcrypt"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/workflows"
)

// Words only these jobs' callers wrote: none may reach Temporal's database in clear. Each is
// unusual enough that finding it there cannot be chance (and none is in a workflow ID: an
// idempotency key is the caller's choice of words, and a routing key, README says).
const (
	pcPurpose   = "Quetzal renewal mailing 7Q3X"
	pcColSecret = "otter_whisker_code"
	pcColPlain  = "kestrel_plumage_tint"
	pcComment   = "cleared by the Zanzibar audit 9PX"
	pcParam     = "marmoset_flavour"
	pcParamVal  = "tangerine-obsidian-42"
	pcStderr    = "pangolin_stderr_marker"
	pcRejection = "Narwhal objection 5KQ"
)

// pcLedger is a SQLite dataset whose column names are distinctive words.
func pcLedger(t *testing.T) contract.Dataset {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.db")
	db, err := sql.Open("sqlite", path)
	must(t, err)
	defer db.Close()
	_, err = db.Exec(fmt.Sprintf(`CREATE TABLE ledger (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, %s TEXT, %s TEXT)`, pcColSecret, pcColPlain))
	must(t, err)
	for i := 1; i <= 50; i++ {
		_, err = db.Exec(`INSERT INTO ledger VALUES (?, 'acme', ?, ?)`, i, fmt.Sprintf("w%d", i), "grey")
		must(t, err)
	}
	return contract.Dataset{Name: "ledger", Driver: contract.DriverSQLite, DSN: path, Table: "ledger", TenantColumn: "tenant",
		KeyColumn: "id", KeyType: contract.KeyTypeInteger,
		Columns: []contract.Column{{Name: "id"}, {Name: pcColSecret, Sensitive: true}, {Name: pcColPlain}}}.WithDefaults()
}

// TestPayloadsEncryptedAtRest runs an export (purpose, sensitive column, an approver's comment)
// and an eval (params, an episode failing with its stderr in the failure) to the end, and
// rejects a second export (a comment, ending in a cancellation), on a Temporal server keeping its SQLite database in a file,
// then reads that file's bytes: none of the callers' words is there in clear, while jobgate
// still answers them decoded, and the envelopes name tenant and key.
func TestPayloadsEncryptedAtRest(t *testing.T) {
	t.Parallel()
	srv, dir := fileTemporal(t)
	// Episode 1 fails once and for all, its stderr in the failure's message.
	script := filepath.Join(t.TempDir(), "episode.sh")
	must(t, os.WriteFile(script, []byte("#!/bin/sh\nif [ \"$JOBGATE_EPISODE_INDEX\" = 1 ]; then echo "+pcStderr+" >&2; exit 3; fi\necho '{\"score\": 1}'\n"), 0o700))
	suites := fmt.Sprintf(`{"suites":[{"name":"cmd","kind":"command","command":["sh",%q],"max_attempts":1}]}`, script)
	b := setup(t, setupOpts{temporalAddr: srv.FrontendHostPort(), datasetsJSON: catalogJSON(t, pcLedger(t)), suitesJSON: suites})

	csAna := b.session(ana, 0, "")
	ex := mustView(t, call(t, csAna, "start_export", map[string]any{"idempotency_key": "pc-x1", "dataset": "ledger",
		"format": "csv", "columns": []string{"id", pcColSecret, pcColPlain}, "purpose": pcPurpose}))
	ev := mustView(t, call(t, csAna, "start_eval", map[string]any{"idempotency_key": "pc-e1", "suite": "cmd", "episodes": 3,
		"params": map[string]any{pcParam: pcParamVal}}))
	w := exWait(t, csAna, ex.Handle, workflows.StatusAwaitingInput, 30*time.Second)
	if w.NeedsInput.Scope["purpose"] != pcPurpose {
		t.Fatalf("needs_input.scope decoded: %+v", w.NeedsInput.Scope)
	}
	csSteward := b.session(steward, 1, "")
	mustView(t, call(t, csSteward, "resume_export", map[string]any{"handle": w.Handle, "input_id": w.NeedsInput.InputID,
		"scope_digest": w.NeedsInput.ScopeDigest, "decision": "approve", "comment": pcComment}))
	done := exWait(t, csAna, ex.Handle, workflows.StatusSucceeded, 60*time.Second)
	evDone := waitStatus(t, csAna, ev.Handle, workflows.StatusSucceeded, 60*time.Second)
	if evDone.Progress.Failed != 1 {
		t.Fatalf("eval progress %+v, want episode 1 failed", evDone.Progress)
	}
	// A rejection ends a job as cancelled: its comment goes no further than the sealed memo.
	rx := mustView(t, call(t, csAna, "start_export", map[string]any{"idempotency_key": "pc-x2", "dataset": "ledger",
		"format": "csv", "columns": []string{"id", pcColSecret}, "purpose": "second request"}))
	rw := exWait(t, csAna, rx.Handle, workflows.StatusAwaitingInput, 30*time.Second)
	mustView(t, call(t, csSteward, "resume_export", map[string]any{"handle": rw.Handle, "input_id": rw.NeedsInput.InputID,
		"scope_digest": rw.NeedsInput.ScopeDigest, "decision": "reject", "comment": pcRejection}))
	if rv := exWait(t, csAna, rx.Handle, workflows.StatusCancelled, 30*time.Second); rv.Error == nil || !strings.Contains(rv.Error.Message, pcRejection) {
		t.Fatalf("rejected export's error: %+v", rv.Error)
	}

	// jobgate reads them back through the codec.
	r := exResult(t, done)
	if r.Decision == nil || r.Decision.Comment != pcComment || !strings.Contains(r.Decision.Meaning, pcPurpose) ||
		strings.Join(r.Columns, ",") != "id,"+pcColSecret+","+pcColPlain {
		t.Fatalf("get_export result: %+v", r)
	}
	// The eval's input, read by a client holding the keys, carries the params.
	hist := b.temporal.GetWorkflowHistory(context.Background(), ev.JobID, "", false, 0)
	first, err := hist.Next()
	must(t, err)
	in := first.GetWorkflowExecutionStartedEventAttributes().GetInput()
	p := in.GetPayloads()[0]
	if !strings.Contains(payloadcrypt.Describe(p), "encrypted payload of tenant acme") {
		t.Fatalf("the eval's input is %s", payloadcrypt.Describe(p))
	}
	var args map[string]any
	must(t, b.dc.FromPayload(p, &args))
	if raw, _ := json.Marshal(args); !strings.Contains(string(raw), pcParamVal) {
		t.Fatalf("decoded eval input %s", raw)
	}
	// Without the keys, the default converter refuses it rather than misread it.
	if err := converter.GetDefaultDataConverter().FromPayload(p, &args); err == nil {
		t.Fatal("the default converter decoded an encrypted payload")
	}

	// Temporal's database, as an operator (or a backup) holds it. Stop the server so every
	// write is in the files (the WAL too), then read every file of the data dir.
	must(t, srv.Stop())
	all := dirBytes(t, dir)
	// The job IDs are there (routing keys): proof the bytes are the right ones.
	if !bytes.Contains(all, []byte(ex.JobID)) || !bytes.Contains(all, []byte(payloadcrypt.EncodingEncrypted)) {
		t.Fatalf("the database files (%d bytes) hold neither the job ID %s nor an encrypted payload: wrong files", len(all), ex.JobID)
	}
	for _, word := range []string{pcPurpose, "Quetzal", pcColSecret, pcColPlain, pcComment, "Zanzibar", pcParam, pcParamVal,
		pcStderr, pcRejection, "Narwhal"} {
		if i := bytes.Index(all, []byte(word)); i >= 0 {
			lo, hi := max(0, i-80), min(len(all), i+len(word)+80)
			t.Errorf("%q in clear in Temporal's database: …%q…", word, all[lo:hi])
		}
	}
}

// TestPayloadsMixedHistory: a job started and left waiting by a deployment without payload
// keys (its history in clear) is approved and finished by a worker that seals. Its history
// then holds both kinds; the worker reads the clear part, the job succeeds, a reader with the
// keys decodes every payload of it, and it replays with the keys.
func TestPayloadsMixedHistory(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{clearPayloads: true})
	cs := b.session(ana, 0, "")
	v := mustView(t, call(t, cs, "start_eval", acStartArgs(uniqueKey(t), "demo", acOverThreshold, 20, acFast)))
	w := acAwaitInput(t, cs, v.Handle, authz.ApproverOwner)
	b.stopWorker()

	// The deployment gets payload keys: a worker that seals takes over the queue.
	kek := payloadcrypt.NewLocalKEK()
	pw := &app.WorkerMain{Config: app.WorkerConfig{Temporal: app.TemporalConfig{Address: temporalAddr, Namespace: namespace,
		TaskQueue: b.taskQueue, Payloads: payloadcrypt.Config{KEK: kek, StoreURL: b.artifacts}}, MaxConcurrentEpisodes: 50},
		ResumeKeys: b.resumeKeys, SigningKeys: b.signingKeys}
	must(t, pw.Run(context.Background()))
	t.Cleanup(func() { _ = pw.Close() })
	// The answer goes through a frontend still without keys (its update argument in clear).
	mustView(t, call(t, cs, "resume_eval", acResumeArgs(w, "approve", nil)))

	keys, err := payloadcrypt.Open(context.Background(), kek, b.artifacts, payloadcrypt.Options{})
	must(t, err)
	t.Cleanup(func() { _ = keys.Close() })
	dc := payloadcrypt.NewDataConverter(keys.Store)
	c, err := client.Dial(client.Options{HostPort: temporalAddr, Namespace: namespace, DataConverter: dc,
		FailureConverter: payloadcrypt.NewFailureConverter(dc)})
	must(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var res workflows.EvalResult
	must(t, c.GetWorkflow(ctx, v.JobID, "").Get(ctx, &res))
	if res.Episodes != acOverThreshold || res.ApprovedBy != "ana" {
		t.Fatalf("result %+v", res)
	}

	hist := &historypb.History{}
	it := c.GetWorkflowHistory(ctx, v.JobID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	sealed, clear := 0, 0
	for it.HasNext() {
		ev, err := it.Next()
		must(t, err)
		hist.Events = append(hist.Events, ev)
		for _, p := range pcPayloads(ev) {
			if string(p.GetMetadata()[converter.MetadataEncoding]) == payloadcrypt.EncodingEncrypted {
				sealed++
			} else {
				clear++
			}
			var any json.RawMessage
			if err := dc.FromPayload(p, &any); err != nil {
				t.Fatalf("event %d (%s): %s does not decode: %v", ev.GetEventId(), ev.GetEventType(), payloadcrypt.Describe(p), err)
			}
		}
	}
	if sealed == 0 || clear == 0 {
		t.Fatalf("history has %d sealed and %d clear payloads: not a mixed one", sealed, clear)
	}
	r, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{DataConverter: dc,
		FailureConverter: payloadcrypt.NewFailureConverter(dc), Interceptors: []interceptor.WorkerInterceptor{payloadcrypt.WorkerInterceptor()}})
	must(t, err)
	r.RegisterWorkflowWithOptions((&workflows.Workflows{}).Eval, workflow.RegisterOptions{Name: workflows.EvalWorkflowName})
	must(t, r.ReplayWorkflowHistoryWithOptions(nil, hist, worker.ReplayWorkflowHistoryOptions{
		OriginalExecution: workflow.Execution{ID: v.JobID}}))
	t.Logf("mixed history: %d clear and %d sealed payloads; it replays", clear, sealed)
}

// pcPayloads are the payloads an event's input, result, update or activity attributes carry
// (enough of them to see both kinds in an eval's history).
func pcPayloads(ev *historypb.HistoryEvent) []*commonpb.Payload {
	var out []*commonpb.Payload
	add := func(ps *commonpb.Payloads) { out = append(out, ps.GetPayloads()...) }
	add(ev.GetWorkflowExecutionStartedEventAttributes().GetInput())
	add(ev.GetWorkflowExecutionCompletedEventAttributes().GetResult())
	add(ev.GetActivityTaskScheduledEventAttributes().GetInput())
	add(ev.GetActivityTaskCompletedEventAttributes().GetResult())
	add(ev.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetInput().GetArgs())
	add(ev.GetWorkflowExecutionUpdateCompletedEventAttributes().GetOutcome().GetSuccess())
	add(ev.GetMarkerRecordedEventAttributes().GetDetails()["data"])
	for _, p := range ev.GetWorkflowPropertiesModifiedEventAttributes().GetUpsertedMemo().GetFields() {
		out = append(out, p)
	}
	return out
}

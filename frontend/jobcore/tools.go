package jobcore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/events"
	"github.com/jobgate/jobgate/frontend/telemetry"
)

// toolDef is one tool: its schema, its handler and the policy action whose scopes the HTTP
// layer checks (403 insufficient_scope) before the tool runs.
type ToolDef struct {
	Tool    *mcp.Tool
	Handler mcp.ToolHandler
	Action  authz.Action
	// task is how a start tool (ActionStart) meets the Tasks extension: taskOptional (the
	// zero value: a task for a client that declares the extension, the job view otherwise),
	// taskRequired or taskForbidden. Other tools never create tasks.
	Task TaskSupport
}

// tools lists every tool, reads first then writes (the order tools/list shows): every kind's
// get tool, the lists, the kinds' further read tools, then every kind's start, cancel and
// resume tools and the kinds' further write tools; kinds in Options order.
func (f *Core) Tools() []ToolDef {
	var defs []ToolDef
	each := func(tools func(ServedKind) []ToolDef) {
		for _, k := range f.Kinds {
			defs = append(defs, tools(k)...)
		}
	}
	each(func(k ServedKind) []ToolDef { return []ToolDef{k.get} })
	defs = append(defs, f.ListJobsTool(), f.listApprovalsTool(), f.describeJobTool())
	each(func(k ServedKind) []ToolDef { return k.Reads })
	each(func(k ServedKind) []ToolDef { return []ToolDef{k.start} })
	each(func(k ServedKind) []ToolDef { return []ToolDef{k.cancel} })
	each(func(k ServedKind) []ToolDef { return []ToolDef{k.resume} })
	each(func(k ServedKind) []ToolDef { return k.Writes })
	defs = append(defs, f.decideTool()) // app-only: frontend/mcpapp lists it only to hosts that render apps
	for _, td := range defs {
		td.freezeSchemas()
	}
	return defs
}

// freezeSchemas replaces the tool's finished schemas by their JSON (the same bytes tools/list
// sends). The SDK re-marshals a tool's input schema on every tools/call (looking for
// x-mcp-header annotations, SEP-2243); a *jsonschema.Schema marshals by reflection, ~45
// allocations a call, a json.RawMessage as the bytes it is.
func (td ToolDef) freezeSchemas() {
	for _, s := range []*any{&td.Tool.InputSchema, &td.Tool.OutputSchema} {
		if js, ok := (*s).(*jsonschema.Schema); ok && js != nil {
			b, err := json.Marshal(js)
			if err != nil {
				panic(fmt.Sprintf("tool %s: schema: %v", td.Tool.Name, err))
			}
			*s = json.RawMessage(b)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// newTool builds a tool whose arguments decode strictly into In. Argument errors become
// invalid_argument naming the field, not the SDK's generic schema message, so the model can fix
// the call. Error results carry no structuredContent (see errorResult), so every result a client
// can receive validates against the output schema.
func NewTool[In, Out any](f *Core, action authz.Action, t *mcp.Tool, run func(context.Context, authz.Principal, In) (Out, error)) ToolDef {
	return newKindTool(f, "", action, t, run)
}

// newKindTool is newTool for a tool of one job kind (start_*, get_*, cancel_*, resume_*): its
// tool errors carry the kind (ToolError.Kind) unless they already name one, so a client learns
// which kind an error concerns from a field, not from the message. not_found does not: it is
// one answer, byte for byte, for every unknown or invisible job whichever tool was asked.
func newKindTool[In, Out any](f *Core, kind string, action authz.Action, t *mcp.Tool, run func(context.Context, authz.Principal, In) (Out, error)) ToolDef {
	in, schemaErr := jsonschema.For[In](nil)
	if schemaErr != nil {
		panic(fmt.Sprintf("tool %s: input schema: %v", t.Name, schemaErr))
	}
	in.AdditionalProperties = &jsonschema.Schema{Not: &jsonschema.Schema{}}
	ot := reflect.TypeFor[Out]()
	if ot.Kind() == reflect.Pointer {
		ot = ot.Elem() // results are never null
	}
	out, schemaErr := jsonschema.ForType(ot, nil)
	if schemaErr != nil {
		panic(fmt.Sprintf("tool %s: output schema: %v", t.Name, schemaErr))
	}
	t.InputSchema, t.OutputSchema = in, out
	name := t.Name
	h := func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		start := time.Now()
		var ti = req.Extra
		p, ok := authz.Principal{}, false
		if ti != nil {
			p, ok = PrincipalFrom(ti.TokenInfo)
		}
		if !ok {
			return nil, ErrNoPrincipal
		}
		fields := make([]zap.Field, 0, 8) // tool, tenant, sub, trace_id, span_id, latency, job_id, code
		fields = append(fields, zap.String("tool", name), zap.String("tenant", p.Tenant), zap.String("sub", p.Subject))
		fields = append(fields, telemetry.LogTrace(ctx)...)
		// Everything below is per call: handlers run concurrently for many tenants.
		var (
			args In
			res  Out
			err  error
			rec  = &CallRecord{Req: req}
		)
		if err = decodeArgs(req.Params.Arguments, &args); err == nil {
			ctx = context.WithValue(ctx, CallRecordKey{}, rec)
			res, err = run(ctx, p, args)
		}
		fields = append(fields, zap.Duration("latency", time.Since(start)))
		if events.IsRender(ctx) {
			// An event stream's re-render (events/follow.go), not a call anyone made: no log line,
			// no tool-call metric (jobgate_event_stream_calls_total counts them).
			return quietResult(res, err)
		}
		if rec.jobID != "" {
			fields = append(fields, zap.String("job_id", rec.jobID))
		}
		var ir *InputRequired
		if errors.As(err, &ir) {
			f.Metrics.ToolCall(name, telemetry.OutcomeInputRequired, time.Since(start))
			telemetry.SpanOutcome(ctx, rec.jobID, "input_required")
			f.Log.Info("tool call", append(fields, zap.String("code", "input_required"))...)
			return ir.Res, nil
		}
		if err != nil {
			if te, ok := AsToolError(err); ok {
				if kind != "" && te.Kind == "" && te.Code != CodeNotFound {
					c := *te // the error may be shared: set the kind on a copy
					c.Kind = kind
					te = &c
				}
				f.Metrics.ToolCall(name, te.Code, time.Since(start))
				telemetry.SpanOutcome(ctx, rec.jobID, te.Code)
				f.Log.Info("tool call", append(fields, zap.String("code", te.Code))...)
				return ErrorResult(te), nil
			}
			f.Metrics.ToolCall(name, telemetry.OutcomeError, time.Since(start))
			telemetry.SpanOutcome(ctx, rec.jobID, telemetry.OutcomeError)
			f.Log.Error("tool call failed", append(fields, zap.Error(err))...)
			return nil, err
		}
		f.Metrics.ToolCall(name, telemetry.OutcomeOK, time.Since(start))
		telemetry.SpanOutcome(ctx, rec.jobID, "ok")
		f.Log.Info("tool call", append(fields, zap.String("code", "ok"))...)
		r, err := okResult(res)
		if err == nil && rec.meta != nil {
			r.Meta = rec.meta // the approval card's nonces (apps.go): never in content or structuredContent
		}
		return r, err
	}
	return ToolDef{Tool: t, Handler: h, Action: action}
}

// quietResult is a tool's answer as newKindTool gives it, without its log line and metric (an
// event stream's re-render).
func quietResult[Out any](res Out, err error) (*mcp.CallToolResult, error) {
	var ir *InputRequired
	switch {
	case errors.As(err, &ir):
		return ir.Res, nil
	case err != nil:
		if te, ok := AsToolError(err); ok {
			return ErrorResult(te), nil
		}
		return nil, err
	}
	return okResult(res)
}

// enum restricts a string property of a tool's input schema to vals.
func (td ToolDef) enum(prop string, vals ...string) ToolDef {
	s := td.Tool.InputSchema.(*jsonschema.Schema).Properties[prop]
	for _, v := range vals {
		s.Enum = append(s.Enum, v)
	}
	return td
}

// bounds sets an integer property's inclusive range.
func (td ToolDef) bounds(prop string, lo, hi float64) ToolDef {
	s := td.Tool.InputSchema.(*jsonschema.Schema).Properties[prop]
	s.Minimum, s.Maximum = &lo, &hi
	return td
}

// callRecord is a tool call's context value: the request being served (see callRequest), and
// what the call's log line needs from deep inside it: the job it touched, also when it was
// refused (those are the calls an audit looks for).
type CallRecord struct {
	Req   *mcp.CallToolRequest
	jobID string
	// meta is the result's _meta, for a host that renders apps (noteApprovalCards); nil: none.
	meta mcp.Meta
}

type CallRecordKey struct{}

// noteJob records the job a call is about, from a verified handle or a validated key.
func noteJob(ctx context.Context, id string) {
	if rec, ok := ctx.Value(CallRecordKey{}).(*CallRecord); ok {
		rec.jobID = id
	}
}

// decodeArgs decodes strictly: unknown fields and wrong types are invalid_argument naming the field.
func decodeArgs(raw json.RawMessage, dst any) error {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(dst)
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			return invalidArg("arguments", "must be one JSON object")
		}
		return nil
	}
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return invalidArg("arguments", "must be a JSON object")
		}
		return invalidArg(field, "must be %s, not %s", jsonKind(te.Type.Kind().String()), te.Value)
	case errors.As(err, &se):
		return invalidArg("arguments", "not valid JSON")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return invalidArg(f, "unknown argument")
	}
	return invalidArg("arguments", "%v", err)
}

func jsonKind(goKind string) string {
	switch goKind {
	case "int", "int64", "int32", "float64":
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "map", "struct":
		return "an object"
	case "slice":
		return "an array"
	}
	return goKind
}

package frontend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/converter"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/jobstore/memstore"
	"github.com/jobgate/jobgate/frontend/mcpbody"
	"github.com/jobgate/jobgate/frontend/temporalstore"
	"github.com/jobgate/jobgate/workflows"
)

// rcNeedsInput is an open request with everything that could encode differently: nested maps,
// numbers, HTML-special and non-ASCII characters.
func rcNeedsInput() *workflows.NeedsInput {
	return &workflows.NeedsInput{InputID: "approve-0123456789ab", Prompt: "Approve <150> episodes & more? «ja»",
		AnswerSchema: map[string]any{"type": "object", "required": []any{"decision"}, "properties": map[string]any{
			"decision": map[string]any{"type": "string", "enum": []any{"approve", "reject"}},
			"comment":  map[string]any{"type": "string", "maxLength": 1000}}},
		ScopeDigest: "sha256:" + strings.Repeat("c", 64), Scope: map[string]any{"suite": "demo", "episodes": 150, "ratio": 0.1, "tags": []any{"a<b", "ü"}},
		Approver: authz.ApproverOwner, RequestedBy: "ana", ExpiresAt: rcNow.Add(time.Hour)}
}

func awaitingInfo(t *testing.T, id string, ni *workflows.NeedsInput) *workflowpb.WorkflowExecutionInfo {
	info := memstore.ExecInfo(t, id, "acme", "ana", "eval", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, workflows.StatusAwaitingInput)
	info.Memo.Fields[workflows.MemoNeedsInput] = memstore.Payload(t, ni)
	return info
}

// A view rendered from the cache is byte-identical to one rendered from a fresh decode through
// the data converter (another converter instance turns the fast paths and the cache off).
func TestNeedsInputCache_SameView(t *testing.T) {
	fast := newResultFixture(t, nil)
	slow := newResultFixture(t, nil)
	dc := converter.NewCompositeDataConverter(converter.NewNilPayloadConverter(), converter.NewByteSlicePayloadConverter(),
		converter.NewProtoJSONPayloadConverter(), converter.NewProtoPayloadConverter(), converter.NewJSONPayloadConverter())
	slow.tc.Dec = temporalstore.InfoDecoder(dc)
	info := awaitingInfo(t, "acme/eval/wait", rcNeedsInput())
	slow.tc.Put(info)
	h := fast.handle("acme", "acme/eval/wait", "eval")
	want, _ := slow.get(t, rcAna, "eval", h)
	if !strings.Contains(want, `"needs_input":{"input_id":"approve-0123456789ab"`) || !strings.Contains(want, `\u003c150\u003e`) {
		t.Fatalf("reference view: %s", want)
	}
	for i := range 3 { // a miss, then hits (each put reads the job as a Describe does)
		fast.tc.Put(info)
		if got, _ := fast.get(t, rcAna, "eval", h); got != want {
			t.Fatalf("call %d:\n got %s\nwant %s", i, got, want)
		}
	}
	// The job's own decode matches the data converter's.
	j := fast.tc.Dec.JobFromInfo(info)
	var ref *workflows.NeedsInput
	if err := dc.FromPayload(info.Memo.Fields[workflows.MemoNeedsInput], &ref); err != nil ||
		!reflect.DeepEqual(j.NeedsInput, ref) || j.NeedsInputJSON == nil {
		t.Fatalf("decoded %+v, want %+v (view %s)", j.NeedsInput, ref, j.NeedsInputJSON)
	}
	// A view without the kept encoding encodes the same.
	v := jobstore.NeedsInputViewOf(ref)
	plain, _ := json.Marshal(v)
	if !bytes.Equal(plain, j.NeedsInputJSON) {
		t.Fatalf("kept %s, encodes %s", j.NeedsInputJSON, plain)
	}
}

func TestParsedBodyMatchesPlainDecode(t *testing.T) {
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_eval","arguments":{"handle":"h"}}}`,
		`{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"get_\u0065val"}}`,
		`{"jsonrpc":"2.\u0030","id":1,"method":"tools/call","params":{"name":7}}`,
		`{"jsonrpc":"2.0","id":1,"method":null,"params":null}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[1]}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call"}`,
		`[{"method":"tools/call","params":{"name":"a"}},{"method":"ping"},{"method":"tools/call","params":"x"}]`,
		`{"jsonrpc":"2.0","id":1e400,"method":"tasks/get","params":{"taskId":"t"}}`,
	} {
		pb := mcpbody.Parse([]byte(body))
		// The reference: every member decoded on its own, as before the shared parse.
		var wantNames []string
		var msgs []map[string]json.RawMessage
		if body[0] == '[' {
			_ = json.Unmarshal([]byte(body), &msgs)
		} else {
			var m map[string]json.RawMessage
			_ = json.Unmarshal([]byte(body), &m)
			msgs = append(msgs, m)
		}
		for _, m := range msgs {
			var method string
			if json.Unmarshal(m["method"], &method) != nil || method != "tools/call" {
				continue
			}
			var params map[string]json.RawMessage
			_ = json.Unmarshal(m["params"], &params)
			var name string
			_ = json.Unmarshal(params["name"], &name)
			wantNames = append(wantNames, name)
		}
		if got := pb.ToolNames(); fmt.Sprint(got) != fmt.Sprint(wantNames) {
			t.Errorf("%s: names %q, want %q", body, got, wantNames)
		}
		req, ok := rpcRequestOf(pb)
		if body[0] == '[' {
			if ok {
				t.Errorf("%s: a batch parsed as one request", body)
			}
			continue
		}
		var version, method string
		wantOK := json.Unmarshal(msgs[0]["jsonrpc"], &version) == nil && version == "2.0" && json.Unmarshal(msgs[0]["method"], &method) == nil
		if ok != wantOK {
			t.Errorf("%s: request ok %v, want %v", body, ok, wantOK)
			continue
		}
		if ok {
			var name string
			_ = json.Unmarshal(req.params["name"], &name)
			if req.method != method || req.name != name {
				t.Errorf("%s: method %q name %q, want %q %q", body, req.method, req.name, method, name)
			}
		}
	}
}

// needsInputOf reverses needsInputViewOf: a task computes the policy and the elicitation from
// the view, so the view must carry every field of the request.
func TestNeedsInputViewCarriesEveryField(t *testing.T) {
	ni := rcNeedsInput()
	ni.AllowSelf = true
	rv := reflect.ValueOf(*ni)
	for i := range rv.NumField() {
		if rv.Field(i).IsZero() {
			t.Fatalf("fixture leaves NeedsInput.%s zero: set it, and carry it in NeedsInputView", rv.Type().Field(i).Name)
		}
	}
	v := jobstore.NeedsInputViewOf(ni)
	if got := needsInputOf(&v); !reflect.DeepEqual(got, ni) {
		t.Fatalf("round trip: %+v, want %+v", got, ni)
	}
}

// tasks/get of a job waiting for input reads the job once (the forwarded get_*), and still
// offers the input request only to whoever may answer it.
func TestTaskGetAwaitingOneDescribe(t *testing.T) {
	fx := newResultFixture(t, nil)
	fx.tc.Put(awaitingInfo(t, "acme/eval/wait", rcNeedsInput()))
	h := fx.handle("acme", "acme/eval/wait", "eval")
	srv := fx.f.Handler()
	get := func(p authz.Principal) (*task, *rpcError) {
		tok, err := authz.MintHS256(bytes.Repeat([]byte{1}, 32), authz.MintOptions{Issuer: "iss", Audience: "http://localhost/mcp",
			Tenant: p.Tenant, Subject: p.Subject, Scopes: p.Scopes, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": methodTasksGet, "params": map[string]any{"taskId": h,
			"_meta": map[string]any{mcp.MetaKeyProtocolVersion: jobcore.ProtocolMRTR,
				mcp.MetaKeyClientCapabilities: map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}}}})
		req := httptest.NewRequest(http.MethodPost, "http://localhost/mcp", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("MCP-Protocol-Version", jobcore.ProtocolMRTR)
		req.Header.Set("Mcp-Method", methodTasksGet)
		req.Header.Set("Mcp-Name", h)
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		var msg struct {
			Result *task
			Error  *rpcError
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &msg); err != nil {
			t.Fatalf("tasks/get: %d %s", rec.Code, rec.Body)
		}
		return msg.Result, msg.Error
	}
	tk, rerr := get(rcAna)
	if rerr != nil || tk.Status != taskInputRequired || len(tk.InputRequests) != 1 || tk.StatusMessage != rcNeedsInput().Prompt {
		t.Fatalf("owner: %+v %+v", tk, rerr)
	}
	if _, ok := tk.InputRequests[jobcore.TaskInputKey(rcNeedsInput())]; !ok {
		t.Fatalf("input requests keyed %v", tk.InputRequests)
	}
	if fx.tc.Describes != 1 {
		t.Fatalf("tasks/get made %d Describes, want 1", fx.tc.Describes)
	}
	ro, rerr := get(authz.Principal{Tenant: "acme", Subject: "ana", Scopes: []authz.Scope{authz.ScopeRead}})
	if rerr != nil || ro.Status != taskWorking || len(ro.InputRequests) != 0 {
		t.Fatalf("reader: %+v %+v", ro, rerr)
	}
	if _, rerr := get(rcBo); rerr == nil || rerr.Message != errTaskNotFound.Message {
		t.Fatalf("other owner: %+v", rerr)
	}
}

// wantsElicitation's shortcut (no key that folds to "elicitation") answers as the full decode.
func TestWantsElicitationShortcut(t *testing.T) {
	full := jobcore.DeclaresElicitation // the decode wantsElicitation makes when the shortcut does not apply
	for _, caps := range []any{
		map[string]any{}, map[string]any{"roots": map[string]any{"listChanged": true}},
		map[string]any{"elicitation": map[string]any{}}, map[string]any{"Elicitation": map[string]any{"form": map[string]any{}}},
		map[string]any{"ELICITATION": map[string]any{"url": map[string]any{}}}, map[string]any{"elicitation": nil},
		map[string]any{"elicitation": "yes"}, map[string]any{"elicitations": map[string]any{}}, []any{"elicitation"}, "elicitation", nil,
	} {
		req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "get_eval", Meta: mcp.Meta{mcp.MetaKeyClientCapabilities: caps}}}
		if got, want := jobcore.WantsElicitation(req), full(caps); got != want {
			t.Errorf("%#v: %v, want %v", caps, got, want)
		}
	}
}

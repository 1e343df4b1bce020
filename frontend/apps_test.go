package frontend

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/jobstore/memstore"
	"github.com/jobgate/jobgate/frontend/mcpapp"
	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/workflows"
)

// appsFixture is a frontend over the in-memory store with two exports of ana waiting for an
// approver: "q3" of customers (any surface) and "hr" of a dataset that wants human surfaces.
type appsFixture struct {
	h       http.Handler
	f       *Frontend
	tc      *memstore.Store
	handles map[string]string // job name → handle
	n       int
}

var uiCaps = map[string]any{"extensions": map[string]any{jobcore.AppsExtension: map[string]any{"mimeTypes": []string{jobcore.AppMIMEType}}}}

func newAppsFixture(t *testing.T) *appsFixture {
	t.Helper()
	tc := memstore.New()
	demo := contract.DemoDatasets("/data/demo.db")["customers"]
	hr := demo
	hr.Name, hr.ApprovalSurfaces = "hr", []string{contract.ApprovalSurfacePage, contract.ApprovalSurfaceApp}
	fx := &appsFixture{tc: tc, handles: map[string]string{}}
	fx.f = newStoreFrontend(t, tc, jobcore.Options{Kinds: []jobcore.KindSpec{jobcore.EvalKind(jobcore.EvalOptions{}),
		jobcore.ExportKind(jobcore.ExportOptions{Datasets: contract.Datasets{"customers": demo, "hr": hr}})}})
	fx.h = fx.f.Handler()
	for _, ds := range []string{"customers", "hr"} {
		id := "acme/export/ana/" + ds
		info := memstore.ExecInfo(t, id, "acme", "ana", "export", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, workflows.StatusAwaitingInput)
		ni := &workflows.NeedsInput{InputID: "approve-0123456789ab", Prompt: "ana asks to export " + ds + " with email",
			ScopeDigest: "sha256:" + strings.Repeat("d", 64), Approver: authz.ApproverApprover, RequestedBy: "ana",
			ExpiresAt: time.Now().Add(time.Hour),
			Scope:     map[string]any{"dataset": ds, "columns": []string{"id", "email"}, "sensitive_columns": []string{"email"}, "format": "csv", "purpose": "renewals"}}
		info.Memo.Fields[workflows.MemoNeedsInput] = memstore.Payload(t, ni)
		tc.Put(info)
		fx.handles[ds] = fx.f.Opts.Keys.SealHandle(handle.Handle{Tenant: "acme", WorkflowID: id, Kind: "export", Expiry: time.Now().Add(time.Hour)})
	}
	return fx
}

var (
	appSteward = authz.Principal{Tenant: "acme", Subject: "steward", Scopes: []authz.Scope{authz.ScopeApprove}}
	appAna     = authz.Principal{Tenant: "acme", Subject: "ana", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite}}
)

// token is p's bearer token saying the person signed in at authAt (zero: no auth_time).
func appToken(t *testing.T, p authz.Principal, authAt time.Time) string {
	t.Helper()
	var scopes []string
	for _, s := range p.Scopes {
		scopes = append(scopes, string(s))
	}
	claims := jwt.MapClaims{"iss": "iss", "aud": "http://localhost/mcp", "sub": p.Subject, "tenant": p.Tenant,
		"scope": strings.Join(scopes, " "), "iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}
	if !authAt.IsZero() {
		claims["auth_time"] = authAt.Unix()
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(unitSecret)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// call posts one request: a 2026-07-28 one with caps as its client capabilities (nil: none
// beyond the empty set), or a 2025-06-18 one without _meta when caps is "2025".
func (fx *appsFixture) call(t *testing.T, tok string, caps any, method, name string, params map[string]any) (json.RawMessage, *rpcError) {
	t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	req := httptest.NewRequest(http.MethodPost, "http://localhost/mcp", nil)
	if caps == "2025" {
		req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	} else {
		if caps == nil {
			caps = map[string]any{}
		}
		params["_meta"] = map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": caps}
		req.Header.Set("MCP-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", method)
		if name != "" {
			req.Header.Set("Mcp-Name", name)
		}
	}
	fx.n++
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": fx.n, "method": method, "params": params})
	req.Body = httpBody(body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+tok)
	rec := httptest.NewRecorder()
	fx.h.ServeHTTP(rec, req)
	var msg struct {
		Result json.RawMessage
		Error  *rpcError
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &msg); err != nil {
		t.Fatalf("%s %s: %d %s", method, name, rec.Code, rec.Body)
	}
	return msg.Result, msg.Error
}

func httpBody(b []byte) *readCloser { return &readCloser{bytes.NewReader(b)} }

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

func (fx *appsFixture) tool(t *testing.T, tok string, caps any, name string, args map[string]any) (res struct {
	IsError           bool `json:"isError"`
	Content           []struct{ Text string }
	StructuredContent json.RawMessage            `json:"structuredContent"`
	Meta              map[string]json.RawMessage `json:"_meta"`
}, raw json.RawMessage) {
	t.Helper()
	raw, rerr := fx.call(t, tok, caps, "tools/call", name, map[string]any{"name": name, "arguments": args})
	if rerr != nil {
		t.Fatalf("%s: %+v", name, rerr)
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	return res, raw
}

// TestAppsOnlyForHostsThatDeclare: a host without MCP Apps (a 2025 client, a 2026 client that
// does not declare the extension) sees no app-only tool, no card, no resources, no extension;
// one that declares it sees the card named by list_approvals and get_*, decide_approval marked
// visible to the app only, the card's resource and the extension in server/discover.
func TestAppsOnlyForHostsThatDeclare(t *testing.T) {
	fx := newAppsFixture(t)
	tok := appToken(t, appSteward, time.Now())
	for _, caps := range []any{"2025", nil} {
		if caps == "2025" {
			if _, rerr := fx.call(t, tok, caps, "initialize", "", map[string]any{"protocolVersion": "2025-06-18",
				"capabilities": uiCaps, "clientInfo": map[string]any{"name": "x", "version": "1"}}); rerr != nil {
				t.Fatal(rerr)
			}
		}
		raw, rerr := fx.call(t, tok, caps, "tools/list", "", nil)
		if rerr != nil || strings.Contains(string(raw), jobcore.DecideToolName) || strings.Contains(string(raw), "ui://") {
			t.Fatalf("%v: tools/list shows the app: %s %+v", caps, raw, rerr)
		}
		if _, rerr := fx.call(t, tok, caps, "resources/read", jobcore.ApprovalCardURI, map[string]any{"uri": jobcore.ApprovalCardURI}); rerr == nil || rerr.Code != -32601 {
			t.Fatalf("%v: resources/read: %+v, want -32601", caps, rerr)
		}
		_, rerr = fx.call(t, tok, caps, "tools/call", jobcore.DecideToolName, map[string]any{"name": jobcore.DecideToolName, "arguments": map[string]any{}})
		if rerr == nil || rerr.Message != `unknown tool "decide_approval"` {
			t.Fatalf("%v: decide_approval: %+v, want unknown tool", caps, rerr)
		}
		res, raw := fx.tool(t, tok, caps, "get_export", map[string]any{"handle": fx.handles["customers"]})
		if res.IsError || res.Meta[jobcore.MetaApprovalCard] != nil || strings.Contains(string(raw), handle.AppNoncePrefix) {
			t.Fatalf("%v: get_export carries the card: %s", caps, raw)
		}
	}
	// Without jobs:approve, a host without apps still hears "unknown tool", not 403.
	if _, rerr := fx.call(t, appToken(t, appAna, time.Time{}), nil, "tools/call", jobcore.DecideToolName,
		map[string]any{"name": jobcore.DecideToolName, "arguments": map[string]any{}}); rerr == nil || !strings.Contains(rerr.Message, "unknown tool") {
		t.Fatalf("ana's decide_approval without apps: %+v", rerr)
	}

	raw, rerr := fx.call(t, tok, uiCaps, "tools/list", "", nil)
	if rerr != nil {
		t.Fatal(rerr)
	}
	var list struct {
		Tools []struct {
			Name string
			Meta struct {
				UI struct {
					ResourceURI string   `json:"resourceUri"`
					Visibility  []string `json:"visibility"`
				} `json:"ui"`
			} `json:"_meta"`
		}
	}
	must(t, json.Unmarshal(raw, &list))
	carded := map[string]string{}
	for _, tl := range list.Tools {
		carded[tl.Name] = tl.Meta.UI.ResourceURI
		if tl.Name == jobcore.DecideToolName && strings.Join(tl.Meta.UI.Visibility, ",") != "app" {
			t.Fatalf("decide_approval's visibility %v, want [app]", tl.Meta.UI.Visibility)
		}
	}
	for _, n := range []string{"list_approvals", "get_export", "get_eval", jobcore.DecideToolName} {
		if carded[n] != jobcore.ApprovalCardURI {
			t.Errorf("%s names %q, want the card", n, carded[n])
		}
	}
	if carded["resume_export"] != "" || carded["start_export"] != "" {
		t.Errorf("resume/start name a card: %v", carded)
	}
	raw, rerr = fx.call(t, tok, uiCaps, "resources/read", jobcore.ApprovalCardURI, map[string]any{"uri": jobcore.ApprovalCardURI})
	var rr struct {
		Contents []struct{ URI, MIMEType, Text string }
	}
	if rerr != nil || json.Unmarshal(raw, &rr) != nil || len(rr.Contents) != 1 || rr.Contents[0].MIMEType != jobcore.AppMIMEType ||
		rr.Contents[0].Text != mcpapp.CardHTML() || !strings.Contains(rr.Contents[0].Text, "connect-src 'none'") ||
		!strings.Contains(string(raw), `"resultType":"complete"`) {
		t.Fatalf("resources/read: %+v %.300s", rerr, raw)
	}
	raw, rerr = fx.call(t, tok, uiCaps, "server/discover", "", nil)
	if rerr != nil || !strings.Contains(string(raw), `"`+jobcore.AppsExtension+`":{"mimeTypes":["text/html;profile=mcp-app"]}`) {
		t.Fatalf("discover: %s %+v", raw, rerr)
	}
	raw, _ = fx.call(t, tok, nil, "server/discover", "", nil)
	if strings.Contains(string(raw), jobcore.AppsExtension) {
		t.Fatalf("discover without apps names the extension: %s", raw)
	}
}

// TestAppsCardDecides: the steward's card gets a nonce in _meta only; the owner's gets none
// (no form); decide_approval resumes with surface app, and only with the steward's own nonce
// for exactly this request, and (approving a sensitive scope) a recent sign-in.
func TestAppsCardDecides(t *testing.T) {
	fx := newAppsFixture(t)
	tok := appToken(t, appSteward, time.Now())
	res, raw := fx.tool(t, tok, uiCaps, "get_export", map[string]any{"handle": fx.handles["customers"]})
	var cm wire.ApprovalCardMeta
	must(t, json.Unmarshal(res.Meta[jobcore.MetaApprovalCard], &cm))
	nonce := cm.Nonces["acme/export/ana/customers"]
	if !strings.HasPrefix(nonce, handle.AppNoncePrefix+".") || strings.Contains(string(res.StructuredContent), nonce) ||
		strings.Contains(res.Content[0].Text, nonce) {
		t.Fatalf("nonce %q; result %s", nonce, raw)
	}
	res, _ = fx.tool(t, tok, uiCaps, "list_approvals", nil)
	must(t, json.Unmarshal(res.Meta[jobcore.MetaApprovalCard], &cm))
	if len(cm.Nonces) != 2 || strings.Contains(res.Content[0].Text, handle.AppNoncePrefix) {
		t.Fatalf("list_approvals nonces %v", cm.Nonces)
	}
	owner, raw := fx.tool(t, appToken(t, appAna, time.Now()), uiCaps, "get_export", map[string]any{"handle": fx.handles["customers"]})
	if owner.Meta[jobcore.MetaApprovalCard] != nil || strings.Contains(string(raw), handle.AppNoncePrefix) {
		t.Fatalf("the owner's card has a nonce: %s", raw)
	}

	args := func(job, n, decision string) map[string]any {
		return map[string]any{"handle": fx.handles[job], "input_id": "approve-0123456789ab", "scope_digest": "sha256:" + strings.Repeat("d", 64),
			"decision": decision, "comment": "ok for renewals", "nonce": n}
	}
	refused := func(what, tok, job, n, decision, code, msg string) {
		t.Helper()
		res, raw := fx.tool(t, tok, uiCaps, jobcore.DecideToolName, args(job, n, decision))
		if !res.IsError || !strings.Contains(string(raw), `\"code\":\"`+code+`\"`) || !strings.Contains(string(raw), msg) {
			t.Fatalf("%s: %s, want %s with %q", what, raw, code, msg)
		}
	}
	otherNonce := fx.f.Opts.ResumeKeys.SealAppNonce(handle.AppNonce{Request: handle.Request{Tenant: "acme", Subject: "steward", WorkflowID: "acme/export/ana/hr",
		InputID: "approve-0123456789ab", ScopeDigest: "sha256:" + strings.Repeat("d", 64)}, Expiry: time.Now().Add(time.Minute).Truncate(time.Second)})
	staleNonce := fx.f.Opts.ResumeKeys.SealAppNonce(handle.AppNonce{Request: handle.Request{Tenant: "acme", Subject: "steward", WorkflowID: "acme/export/ana/customers",
		InputID: "approve-0123456789ab", ScopeDigest: "sha256:" + strings.Repeat("d", 64)}, Expiry: time.Now().Add(-time.Minute).Truncate(time.Second)})
	handleNonce := fx.f.Opts.Keys.SealAppNonce(handle.AppNonce{Request: handle.Request{Tenant: "acme", Subject: "steward", WorkflowID: "acme/export/ana/customers",
		InputID: "approve-0123456789ab", ScopeDigest: "sha256:" + strings.Repeat("d", 64)}, Expiry: time.Now().Add(time.Minute).Truncate(time.Second)})
	refused("another job's nonce", tok, "customers", otherNonce, "approve", "forbidden", "approval card")
	refused("an expired nonce", tok, "customers", staleNonce, "approve", "forbidden", "expired")
	refused("a nonce under the handle keys", tok, "customers", handleNonce, "approve", "forbidden", "approval card")
	refused("a made-up nonce", tok, "customers", "jgan1.k1.x.y", "approve", "forbidden", "approval card")
	boNonce := fx.f.Opts.ResumeKeys.SealAppNonce(handle.AppNonce{Request: handle.Request{Tenant: "acme", Subject: "bo", WorkflowID: "acme/export/ana/customers",
		InputID: "approve-0123456789ab", ScopeDigest: "sha256:" + strings.Repeat("d", 64)}, Expiry: time.Now().Add(time.Minute).Truncate(time.Second)})
	refused("another approver's nonce", tok, "customers", boNonce, "approve", "forbidden", "approval card")
	refused("a sign-in an hour old", appToken(t, appSteward, time.Now().Add(-time.Hour)), "customers", nonce, "approve", "forbidden",
		"recent sign-in and you signed in at")
	refused("no auth_time", appToken(t, appSteward, time.Time{}), "customers", nonce, "approve", "forbidden",
		"http://localhost/approvals/"+url.PathEscape("acme/export/ana/customers"))
	if len(fx.tc.Resumes) != 0 {
		t.Fatalf("a refused decision reached the job: %+v", fx.tc.Resumes)
	}
	res, raw = fx.tool(t, tok, uiCaps, jobcore.DecideToolName, args("customers", nonce, "approve"))
	if res.IsError || len(fx.tc.Resumes) != 1 {
		t.Fatalf("decide: %s; resumes %+v", raw, fx.tc.Resumes)
	}
	r := fx.tc.Resumes[0].Req
	if r.Surface != jobcore.SurfaceApp || r.SignedInWith != workflows.SignedInBearerJWT || r.Principal.Subject != "steward" ||
		r.Decision != "approve" || r.Comment != "ok for renewals" || r.Meaning != "ana asks to export customers with email" || r.Seal == "" {
		t.Fatalf("resume %+v", r)
	}
	// Rejecting needs no recent sign-in (it discloses nothing).
	hrNonce := cm.Nonces["acme/export/ana/hr"]
	if res, raw := fx.tool(t, appToken(t, appSteward, time.Time{}), uiCaps, jobcore.DecideToolName, args("hr", hrNonce, "reject")); res.IsError {
		t.Fatalf("reject: %s", raw)
	}
}

// TestToolsOfNoKindResolveHandles: describe_job and decide_approval, which take a handle (or job
// ID) of any kind, answer a missing, malformed or expired handle as every per-kind tool does
// (the expired one naming the export kind its handle carries) and a valid one of another tenant
// not_found; decide_approval resolves a valid handle or job ID under the job's own kind.
func TestToolsOfNoKindResolveHandles(t *testing.T) {
	fx := newAppsFixture(t)
	tok := appToken(t, authz.Principal{Tenant: "acme", Subject: "steward", Scopes: []authz.Scope{authz.ScopeApprove, authz.ScopeAdmin}}, time.Now())
	expired := fx.f.Opts.Keys.SealHandle(handle.Handle{Tenant: "acme", WorkflowID: "acme/export/ana/customers", Kind: "export",
		Expiry: time.Now().Add(-time.Minute).Truncate(time.Second)})
	globex := fx.f.Opts.Keys.SealHandle(handle.Handle{Tenant: "globex", WorkflowID: "globex/export/ana/customers", Kind: "export",
		Expiry: time.Now().Add(time.Hour)})
	for _, tool := range []string{"describe_job", jobcore.DecideToolName} {
		for _, c := range []struct{ handle, want string }{
			{"", `\"code\":\"invalid_argument\"`},
			{"jgh1.k1.x.y", `\"code\":\"invalid_handle\"`},
			{expired, `\"code\":\"handle_expired\",\"message\":\"the handle has expired; call start_export`},
			{globex, `\"code\":\"not_found\"`},
		} {
			args := map[string]any{"handle": c.handle, "input_id": "approve-0123456789ab", "scope_digest": "sha256:" + strings.Repeat("d", 64),
				"decision": "approve", "nonce": "n"}
			if tool == "describe_job" {
				args = map[string]any{"handle": c.handle}
			}
			res, raw := fx.tool(t, tok, uiCaps, tool, args)
			if !res.IsError || !strings.Contains(string(raw), c.want) {
				t.Errorf("%s with handle %q: %s, want %s", tool, c.handle, raw, c.want)
			}
		}
	}
	// A valid handle, or the job's ID, resolves under its own kind: the next check refused is
	// the nonce's.
	for _, ref := range []string{fx.handles["customers"], "acme/export/ana/customers"} {
		res, raw := fx.tool(t, tok, uiCaps, jobcore.DecideToolName, map[string]any{"handle": ref, "input_id": "approve-0123456789ab",
			"scope_digest": "sha256:" + strings.Repeat("d", 64), "decision": "approve", "nonce": "n"})
		if !res.IsError || !strings.Contains(string(raw), `\"code\":\"forbidden\",\"message\":\"this decision carries no valid approval-card nonce`) {
			t.Errorf("decide_approval with %q and a bad nonce: %s", ref, raw)
		}
	}
}

// TestAppsHumanSurfaces: a dataset with approval_surfaces refuses every bearer-token answer
// (resume_*, MRTR, tasks/update) with forbidden and the page's link, and offers no MRTR
// elicitation; the card (surface app) may answer it.
func TestAppsHumanSurfaces(t *testing.T) {
	fx := newAppsFixture(t)
	tok := appToken(t, appSteward, time.Now())
	link := "http://localhost/approvals/" + url.PathEscape("acme/export/ana/hr")
	in := map[string]any{"handle": fx.handles["hr"], "input_id": "approve-0123456789ab", "scope_digest": "sha256:" + strings.Repeat("d", 64), "decision": "approve"}
	res, raw := fx.tool(t, tok, nil, "resume_export", in)
	if !res.IsError || !strings.Contains(string(raw), `\"code\":\"forbidden\"`) || !strings.Contains(string(raw), link) {
		t.Fatalf("resume_export: %s", raw)
	}
	elicit := map[string]any{"elicitation": map[string]any{"form": map[string]any{}}}
	res, raw = fx.tool(t, tok, elicit, "get_export", map[string]any{"handle": fx.handles["hr"]})
	if strings.Contains(string(raw), "input_required") || res.IsError {
		t.Fatalf("MRTR offered for a human-only request: %s", raw)
	}
	ni := &workflows.NeedsInput{InputID: "approve-0123456789ab", ScopeDigest: "sha256:" + strings.Repeat("d", 64)}
	raw, rerr := fx.call(t, tok, map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}, methodTasksUpdate, fx.handles["hr"],
		map[string]any{"taskId": fx.handles["hr"], "inputResponses": map[string]any{jobcore.TaskInputKey(ni): map[string]any{"action": "accept",
			"content": map[string]any{"decision": "approve"}}}})
	if rerr == nil || !strings.Contains(rerr.Message, link) {
		t.Fatalf("tasks/update: %s %+v", raw, rerr)
	}
	// The customers export allows any surface: resume_export reaches it.
	in["handle"] = fx.handles["customers"]
	if res, raw := fx.tool(t, tok, nil, "resume_export", in); res.IsError {
		t.Fatalf("resume_export of customers: %s", raw)
	}
	if len(fx.tc.Resumes) != 1 || fx.tc.Resumes[0].ID != "acme/export/ana/customers" {
		t.Fatalf("resumes %+v", fx.tc.Resumes)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

package tests

import (
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/workflows"
)

// TestAccess is the access table from the seed article, run through the real HTTP adapter.
func TestAccess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	anaA := b.session(ana, 0, "")
	started := mustView(t, call(t, anaA, "start_eval", startArgs(uniqueKey(t), 2, map[string]any{"episode_ms": 10})))
	h := started.Handle
	unknown := b.keys.SealHandle(handle.Handle{Tenant: "acme", WorkflowID: "acme/eval/no-such-job", Kind: "eval", Expiry: time.Now().Add(time.Hour)})
	unknownRaw := mustErrRaw(t, call(t, b.session(bo, 0, ""), "get_eval", map[string]any{"handle": unknown}), "not_found")

	t.Run("OwnerOnTwoConnectionsSeesSameJob", func(t *testing.T) {
		anaB := b.session(ana, 1, "2025-06-18")
		v1 := mustView(t, call(t, anaA, "get_eval", map[string]any{"handle": h}))
		v2 := mustView(t, call(t, anaB, "get_eval", map[string]any{"handle": h}))
		if v1.JobID != started.JobID || v2.JobID != started.JobID || v1.Owner != "ana" || v2.CreatedAt != v1.CreatedAt {
			t.Fatalf("views differ: %+v vs %+v", v1, v2)
		}
	})
	t.Run("OtherUserOfTenantDeniedLikeUnknownJob", func(t *testing.T) {
		for _, tool := range []string{"get_eval", "cancel_eval"} {
			raw := mustErrRaw(t, call(t, b.session(bo, 1, ""), tool, map[string]any{"handle": h}), "not_found")
			if raw != unknownRaw {
				t.Fatalf("%s: inaccessible %s != unknown %s", tool, raw, unknownRaw)
			}
		}
		raw := mustErrRaw(t, call(t, b.session(bo, 0, ""), "resume_eval", map[string]any{"handle": h,
			"input_id": "x", "scope_digest": "y", "decision": "approve"}), "not_found")
		if raw != unknownRaw {
			t.Fatalf("resume: %s != %s", raw, unknownRaw)
		}
	})
	t.Run("OtherTenantHandleIsNotFound", func(t *testing.T) {
		raw := mustErrRaw(t, call(t, b.session(gus, 0, ""), "get_eval", map[string]any{"handle": h}), "not_found")
		if raw != unknownRaw {
			t.Fatalf("other tenant %s != unknown %s", raw, unknownRaw)
		}
		// Even expired, another tenant's handle says nothing more than "not found".
		expired := b.keys.SealHandle(handle.Handle{Tenant: "acme", WorkflowID: started.JobID, Kind: "eval", Expiry: time.Now().Add(-time.Hour)})
		mustErrRaw(t, call(t, b.session(gus, 0, ""), "get_eval", map[string]any{"handle": expired}), "not_found")
		mustErr(t, call(t, anaA, "get_eval", map[string]any{"handle": expired}), "handle_expired")
	})
	t.Run("AdminSeesAndApproverDoesNot", func(t *testing.T) {
		v := mustView(t, call(t, b.session(ops, 0, ""), "get_eval", map[string]any{"handle": h}))
		if v.JobID != started.JobID {
			t.Fatalf("admin got %s", v.JobID)
		}
		// An approver sees a job only while it awaits an approver's input; this one never does.
		raw := mustErrRaw(t, call(t, b.session(steward, 0, ""), "get_eval", map[string]any{"handle": h}), "not_found")
		if raw != unknownRaw {
			t.Fatalf("approver: %s != %s", raw, unknownRaw)
		}
	})
	t.Run("TamperedHandleIsInvalid", func(t *testing.T) {
		bad := h[:len(h)-2] + "xx"
		mustErr(t, call(t, anaA, "get_eval", map[string]any{"handle": bad}), "invalid_handle")
		mustErr(t, call(t, anaA, "get_eval", map[string]any{"handle": "hello"}), "invalid_handle")
	})
	t.Run("NoTokenIs401BeforeAnyJobData", func(t *testing.T) {
		for _, authz := range []string{"", "Bearer", "Bearer not-a-jwt", "Basic YW5hOmFuYQ=="} {
			resp, body := postMCP(t, http.DefaultClient, b.url(0), authz, getEvalBody(h))
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("auth %q: status %d", authz, resp.StatusCode)
			}
			if ch := resp.Header.Get("WWW-Authenticate"); !strings.Contains(ch, `resource_metadata="http://localhost/.well-known/oauth-protected-resource/mcp"`) {
				t.Fatalf("challenge %q", ch)
			}
			if strings.Contains(body, started.JobID) || strings.Contains(body, "ana") {
				t.Fatalf("401 body leaks job data: %s", body)
			}
		}
	})
	t.Run("ExpiredTokenOnReusedConnectionIs401", func(t *testing.T) {
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
		resp, _ := postMCP(t, hc, b.url(0), "Bearer "+b.token(ana), getEvalBody(h))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("fresh token: %d", resp.StatusCode)
		}
		expired := b.tokenAt(ana, time.Now().Add(-2*time.Hour), time.Hour)
		var reused bool
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }})
		resp, body := postMCPCtx(ctx, t, hc, b.url(0), "Bearer "+expired, getEvalBody(h))
		if !reused {
			t.Fatal("the second request did not reuse the connection")
		}
		if resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, started.JobID) {
			t.Fatalf("expired token: %d %s", resp.StatusCode, body)
		}
	})
	t.Run("TokenOfAnotherAudienceIs401", func(t *testing.T) {
		resp, _ := postMCP(t, http.DefaultClient, b.url(0), "Bearer "+b.tokenForAudience(ana, "http://elsewhere/mcp"), getEvalBody(h))
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
	t.Run("LackingWriteScopeIs403Challenge", func(t *testing.T) {
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"start_eval","arguments":{"idempotency_key":"x","suite":"demo","episodes":1}}}`
		resp, _ := postMCP(t, http.DefaultClient, b.url(1), "Bearer "+b.token(anaRO), body)
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("status %d", resp.StatusCode)
		}
		ch := resp.Header.Get("WWW-Authenticate")
		for _, want := range []string{`Bearer error="insufficient_scope"`, `scope="jobs:write"`, `resource_metadata="http://localhost/.well-known/oauth-protected-resource/mcp"`} {
			if !strings.Contains(ch, want) {
				t.Fatalf("challenge %q lacks %s", ch, want)
			}
		}
		// A case-folded duplicate key must not disguise the tool the SDK will run.
		sneaky := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"start_eval","Name":"get_eval","arguments":{"idempotency_key":"x","suite":"demo","episodes":1}}}`
		if resp, _ := postMCP(t, http.DefaultClient, b.url(1), "Bearer "+b.token(anaRO), sneaky); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("case-folded body: status %d", resp.StatusCode)
		}
		// The read-only token still reads.
		v := mustView(t, call(t, b.session(anaRO, 1, ""), "get_eval", map[string]any{"handle": h}))
		if v.JobID != started.JobID {
			t.Fatal("read-only owner cannot read")
		}
	})
	t.Run("ProtectedResourceMetadata", func(t *testing.T) {
		for _, p := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"} {
			resp, err := http.Get("http://" + b.frontends[0].Addr() + p)
			must(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, want := range []string{`"resource":"http://localhost/mcp"`, `"authorization_servers":["jobgate-test"]`, `"jobs:approve"`, `"bearer_methods_supported":["header"]`} {
				if !strings.Contains(string(body), want) {
					t.Fatalf("%s: %s lacks %s", p, body, want)
				}
			}
		}
	})
	t.Run("HealthAndReadiness", func(t *testing.T) {
		for _, p := range []string{"/healthz", "/readyz"} {
			resp, err := http.Get("http://" + b.frontends[1].Addr() + p)
			must(t, err)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: %d", p, resp.StatusCode)
			}
		}
	})
	t.Run("LogsCorrelateWithoutSecrets", func(t *testing.T) {
		var sawJob bool
		for _, e := range b.logs.All() {
			m := e.ContextMap()
			line := e.Message
			for _, v := range m {
				if s, ok := v.(string); ok {
					line += " " + s
				}
			}
			if strings.Contains(line, "eyJ") || strings.Contains(line, h) || strings.Contains(line, h[strings.LastIndex(h, ".")+1:]) {
				t.Fatalf("log line leaks a token or handle: %s", line)
			}
			if m["job_id"] == started.JobID && m["tenant"] == "acme" && m["sub"] == "ana" && m["tool"] != nil {
				sawJob = true
			}
		}
		if !sawJob {
			t.Fatal("no tool log line carries job_id, tenant and sub")
		}
	})
	waitStatus(t, anaA, h, workflows.StatusSucceeded, 30*time.Second)
}

func mustErrRaw(t *testing.T, o outcome, code string) string {
	t.Helper()
	mustErr(t, o, code)
	return string(o.Raw)
}

func getEvalBody(h string) string {
	return `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_eval","arguments":{"handle":"` + h + `"}}}`
}

func postMCP(t *testing.T, hc *http.Client, url, authorization, body string) (*http.Response, string) {
	return postMCPCtx(context.Background(), t, hc, url, authorization, body)
}

func postMCPCtx(ctx context.Context, t *testing.T, hc *http.Client, url, authorization, body string, headers ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	must(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := hc.Do(req)
	must(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

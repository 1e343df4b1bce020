package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestProtocolVersions: every supported protocol era works against either replica, with or
// without initialize on that replica.
func TestProtocolVersions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, version := range []string{"", "2026-07-28", "2025-11-25", "2025-06-18"} {
		name := version
		if name == "" {
			name = "latest"
		}
		t.Run(name, func(t *testing.T) {
			cs := b.session(ana, 0, version)
			tools, err := cs.ListTools(context.Background(), nil)
			must(t, err)
			var names []string
			for _, tl := range tools.Tools {
				names = append(names, tl.Name)
			}
			for _, want := range []string{"start_eval", "get_eval", "cancel_eval", "resume_eval"} {
				if !strings.Contains(strings.Join(names, ","), want) {
					t.Fatalf("tools/list lacks %s: %v", want, names)
				}
			}
			v := mustView(t, call(t, cs, "start_eval", startArgs(uniqueKey(t), 1, map[string]any{"episode_ms": 0})))
			// The other replica never saw this client's initialize (or discover).
			other := b.session(ana, 1, version)
			mustView(t, call(t, other, "get_eval", map[string]any{"handle": v.Handle}))
		})
	}
	t.Run("RawWithoutInitialize", func(t *testing.T) {
		v := mustView(t, call(t, b.session(ana, 0, ""), "start_eval", startArgs(uniqueKey(t), 1, nil)))
		// 2025-06-18 style: no initialize ever sent to this replica.
		resp, body := postMCP(t, http.DefaultClient, b.url(1), "Bearer "+b.token(ana), getEvalBody(v.Handle))
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") != "" || !strings.Contains(body, v.JobID) {
			t.Fatalf("legacy raw call: %d session=%q %s", resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), body)
		}
		// 2026-07-28: protocol version in _meta and headers, Mcp-Method/Mcp-Name mirrored.
		modern := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"get_eval","arguments":{"handle":"` + v.Handle +
			`"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}`
		resp, body = postMCPCtx(context.Background(), t, http.DefaultClient, b.url(1), "Bearer "+b.token(ana), modern,
			"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "get_eval")
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, v.JobID) {
			t.Fatalf("2026-07-28 raw call: %d %s", resp.StatusCode, body)
		}
		// Header naming another tool than the body: rejected before any tool runs.
		resp, body = postMCPCtx(context.Background(), t, http.DefaultClient, b.url(1), "Bearer "+b.token(ana), modern,
			"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "cancel_eval")
		if resp.StatusCode != http.StatusBadRequest || strings.Contains(body, v.JobID) {
			t.Fatalf("mismatched Mcp-Name: %d %s", resp.StatusCode, body)
		}
		// GET has no stream in stateless mode.
		req, _ := http.NewRequest(http.MethodGet, b.url(0), nil)
		req.Header.Set("Authorization", "Bearer "+b.token(ana))
		req.Header.Set("Accept", "text/event-stream")
		r2, err := http.DefaultClient.Do(req)
		must(t, err)
		r2.Body.Close()
		if r2.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("GET /mcp: %d", r2.StatusCode)
		}
	})
	t.Run("ToolSchemasDescribeEveryField", func(t *testing.T) {
		cs := b.session(ana, 1, "")
		tools, err := cs.ListTools(context.Background(), nil)
		must(t, err)
		for _, tl := range tools.Tools {
			if tl.Description == "" || tl.Annotations == nil {
				t.Fatalf("%s: no description or annotations", tl.Name)
			}
			raw, _ := json.Marshal(tl.InputSchema)
			var s struct {
				Properties map[string]struct {
					Description string `json:"description"`
				} `json:"properties"`
			}
			must(t, json.Unmarshal(raw, &s))
			for name, p := range s.Properties {
				if p.Description == "" {
					t.Fatalf("%s.%s has no description", tl.Name, name)
				}
			}
		}
	})
}

// TestBadArguments: every tool names the offending field, and nothing is started.
func TestBadArguments(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := b.session(ana, 0, "")
	v := mustView(t, call(t, cs, "start_eval", startArgs(uniqueKey(t), 1, map[string]any{"episode_ms": 0})))
	long := strings.Repeat("x", 1001)
	cases := []struct {
		name, tool string
		args       map[string]any
		field      string
	}{
		{"MissingKey", "start_eval", map[string]any{"suite": "demo", "episodes": 1}, "idempotency_key"},
		{"KeyWithSlash", "start_eval", map[string]any{"idempotency_key": "a/b", "suite": "demo", "episodes": 1}, "idempotency_key"},
		{"KeyTooLong", "start_eval", map[string]any{"idempotency_key": strings.Repeat("k", 129), "suite": "demo", "episodes": 1}, "idempotency_key"},
		{"MissingSuite", "start_eval", map[string]any{"idempotency_key": "k", "episodes": 1}, "suite"},
		{"UnknownSuite", "start_eval", map[string]any{"idempotency_key": "k", "suite": "nope", "episodes": 1}, "suite"},
		{"ZeroEpisodes", "start_eval", map[string]any{"idempotency_key": "k", "suite": "demo", "episodes": 0}, "episodes"},
		{"TooManyEpisodes", "start_eval", map[string]any{"idempotency_key": "k", "suite": "demo", "episodes": 20001}, "episodes"},
		{"FractionalEpisodes", "start_eval", map[string]any{"idempotency_key": "k", "suite": "demo", "episodes": 1.5}, "episodes"},
		{"EpisodesAsString", "start_eval", map[string]any{"idempotency_key": "k", "suite": "demo", "episodes": "3"}, "episodes"},
		{"NegativeConcurrency", "start_eval", map[string]any{"idempotency_key": "k", "suite": "demo", "episodes": 1, "concurrency": -1}, "concurrency"},
		{"HugeConcurrency", "start_eval", map[string]any{"idempotency_key": "k", "suite": "demo", "episodes": 1, "concurrency": 1000}, "concurrency"},
		{"FailRateAboveOne", "start_eval", map[string]any{"idempotency_key": "k", "suite": "demo", "episodes": 1, "params": map[string]any{"fail_rate": 2}}, "params.fail_rate"},
		{"EpisodeMSNegative", "start_eval", map[string]any{"idempotency_key": "k", "suite": "demo", "episodes": 1, "params": map[string]any{"episode_ms": -5}}, "params.episode_ms"},
		{"UnknownParam", "start_eval", map[string]any{"idempotency_key": "k", "suite": "demo", "episodes": 1, "params": map[string]any{"bogus": 1}}, "params.bogus"},
		{"ParamsNotObject", "start_eval", map[string]any{"idempotency_key": "k", "suite": "demo", "episodes": 1, "params": []int{1}}, "params"},
		{"UnknownArgument", "start_eval", map[string]any{"idempotency_key": "k", "suite": "demo", "episodes": 1, "tenant": "globex"}, "tenant"},
		{"GetMissingHandle", "get_eval", map[string]any{}, "handle"},
		{"GetHandleNotString", "get_eval", map[string]any{"handle": 5}, "handle"},
		{"CancelReasonTooLong", "cancel_eval", map[string]any{"handle": v.Handle, "reason": long}, "reason"},
		{"CancelMissingHandle", "cancel_eval", map[string]any{"reason": "x"}, "handle"},
		{"ResumeBadDecision", "resume_eval", map[string]any{"handle": v.Handle, "input_id": "i", "scope_digest": "d", "decision": "maybe"}, "decision"},
		{"ResumeMissingInputID", "resume_eval", map[string]any{"handle": v.Handle, "scope_digest": "d", "decision": "approve"}, "input_id"},
		{"ResumeMissingDigest", "resume_eval", map[string]any{"handle": v.Handle, "input_id": "i", "decision": "approve"}, "scope_digest"},
		{"ResumeCommentTooLong", "resume_eval", map[string]any{"handle": v.Handle, "input_id": "i", "scope_digest": "d", "decision": "approve", "comment": long}, "comment"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := mustErr(t, call(t, cs, c.tool, c.args), "invalid_argument")
			if !strings.HasPrefix(e.Message, c.field+":") {
				t.Fatalf("message %q does not name %s", e.Message, c.field)
			}
		})
	}
	t.Run("NothingStarted", func(t *testing.T) {
		mustErr(t, call(t, cs, "get_eval", map[string]any{"handle": b.keys.SealHandle(handleFor("acme/eval/k"))}), "not_found")
	})
	t.Run("ResumeWhenNotWaiting", func(t *testing.T) {
		mustErr(t, call(t, cs, "resume_eval", map[string]any{"handle": v.Handle, "input_id": "i", "scope_digest": "d", "decision": "approve"}), "input_not_expected")
	})
	t.Run("ExportHandleOnEvalTool", func(t *testing.T) {
		h := handleFor("acme/export/x")
		h.Kind = "export"
		mustErr(t, call(t, cs, "get_eval", map[string]any{"handle": b.keys.SealHandle(h)}), "invalid_argument")
	})
}

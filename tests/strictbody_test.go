package tests

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestProtocolRefusesAmbiguousBodies: a body the SDK would read otherwise than the layers in
// front of it (trailing bytes after the JSON-RPC object, a duplicate key at the top level or in
// params) is 400 with a JSON-RPC parse error before anything runs: no 403 skipped, no tool run,
// no workflow started (CONTRACT semantics 7).
func TestProtocolRefusesAmbiguousBodies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	start := func(key string) string {
		return `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"start_eval","arguments":{"idempotency_key":"` + key +
			`","suite":"demo","episodes":1,"params":{"episode_ms":0}}}}`
	}
	cases := []struct {
		name string
		body func(key string) string
	}{
		{"TrailingWord", func(k string) string { return start(k) + " x" }},
		{"TrailingObject", func(k string) string { return start(k) + `{"jsonrpc":"2.0","id":2,"method":"ping"}` }},
		{"DuplicateTopLevelMethod", func(k string) string {
			return strings.Replace(start(k), `"method":"tools/call"`, `"method":"tools/call","method":"tools/call"`, 1)
		}},
		{"DuplicateNameThenNull", func(k string) string {
			return strings.Replace(start(k), `"name":"start_eval"`, `"name":"start_eval","name":null`, 1)
		}},
		{"DuplicateParams", func(k string) string {
			return strings.Replace(start(k), `"params":{"name"`, `"params":{"name":"get_eval"},"params":{"name"`, 1)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Both a token that may start (no tool may run) and one that may not (the 403 check
			// must not be skipped: the answer is the same 400 either way, before the scope check).
			key := uniqueKey(t)
			for _, p := range []principal{ana, anaRO} {
				resp, body := postMCP(t, http.DefaultClient, b.url(0), "Bearer "+b.token(p), c.body(key))
				var msg struct {
					ID    json.RawMessage `json:"id"`
					Error *struct {
						Code int `json:"code"`
					} `json:"error"`
				}
				if resp.StatusCode != http.StatusBadRequest || json.Unmarshal([]byte(body), &msg) != nil || msg.Error == nil ||
					msg.Error.Code != -32700 || string(msg.ID) != "null" {
					t.Fatalf("%s: %d %s", p.sub, resp.StatusCode, body)
				}
			}
			// Nothing ran: the clean start with the same key is the first (created: true).
			v := mustView(t, call(t, b.session(ana, 1, ""), "start_eval", startArgs(key, 1, map[string]any{"episode_ms": 0})))
			if v.Created == nil || !*v.Created {
				t.Fatalf("the refused body started %s", v.JobID)
			}
		})
	}
	// The same body without the trailing bytes is served (the refusal is about the bytes).
	resp, body := postMCP(t, http.DefaultClient, b.url(0), "Bearer "+b.token(ana), start(uniqueKey(t))+" \n")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"created":true`) {
		t.Fatalf("clean body: %d %s", resp.StatusCode, body)
	}
}

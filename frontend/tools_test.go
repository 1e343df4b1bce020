package frontend

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/mcpbody"
)

// TestConcurrentCallsDoNotShareState: many tenants calling one tool at once each get their own
// answer. (A shared error variable once leaked one tenant's error text to another.)
func TestConcurrentCallsDoNotShareState(t *testing.T) {
	f := newTestFrontend(t)
	var start mcp.ToolHandler
	for _, td := range f.Tools() {
		if td.Tool.Name == "start_eval" {
			start = td.Handler
		}
	}
	const n = 400
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n {
		wg.Go(func() {
			tenant := fmt.Sprintf("t%d", i%8)
			p := authz.Principal{Tenant: tenant, Subject: "ana", Scopes: []authz.Scope{authz.ScopeWrite}}
			args, _ := json.Marshal(map[string]any{"idempotency_key": "k", "suite": "secret-of-" + tenant, "episodes": 1})
			res, err := start(context.Background(), &mcp.CallToolRequest{
				Params: &mcp.CallToolParamsRaw{Name: "start_eval", Arguments: args},
				Extra:  &mcp.RequestExtra{TokenInfo: &auth.TokenInfo{Extra: map[string]any{jobcore.PrincipalKey: p}}},
			})
			if err != nil || !res.IsError {
				errs <- fmt.Sprintf("%s: err=%v isError=%v", tenant, err, res != nil && res.IsError)
				return
			}
			if res.StructuredContent != nil {
				errs <- tenant + ": error result carries structuredContent"
				return
			}
			body := res.Content[0].(*mcp.TextContent).Text
			if !strings.Contains(string(body), `secret-of-`+tenant+`\"`) || strings.Count(string(body), "secret-of-") != 1 {
				errs <- tenant + " got " + body
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestToolNamesMatchKeysExactly(t *testing.T) {
	cases := []struct {
		body string
		want []string
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"start_eval"}}`, []string{"start_eval"}},
		// Case variants must not hide the key the SDK will act on.
		{`{"method":"tools/call","params":{"name":"start_eval","Name":"list_jobs"}}`, []string{"start_eval"}},
		{`{"method":"tools/call","Method":"ping","params":{"name":"start_eval"}}`, []string{"start_eval"}},
		{`{"Method":"tools/call","params":{"name":"start_eval"}}`, nil},
		{`[{"method":"tools/call","params":{"name":"get_eval"}},{"method":"tools/call","params":{"name":"start_eval"}}]`, []string{"get_eval", "start_eval"}},
		{`{"method":"tools/list"}`, nil},
		{`not json`, nil},
	}
	for _, c := range cases {
		if got := mcpbody.Parse([]byte(c.body)).ToolNames(); !slices.Equal(got, c.want) {
			t.Errorf("%s: got %v want %v", c.body, got, c.want)
		}
	}
}

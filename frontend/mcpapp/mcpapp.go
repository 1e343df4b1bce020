// Package mcpapp serves jobgate's MCP Apps approval card (io.modelcontextprotocol/ui,
// SEP-1865) to hosts that declare the extension, and keeps everything of it from hosts that do
// not: a receiving middleware of the MCP server that
//
//   - on tools/list, for a declaring host, names the card in list_approvals' and every get_*
//     tool's _meta.ui.resourceUri (and leaves decide_approval's visibility ["app"] for the host
//     to keep from the model, as the extension has it); for any other host, leaves
//     decide_approval out, so its list is byte for byte what it was without MCP Apps;
//   - on tools/call of decide_approval from a host that does not declare the extension,
//     answers as for an unknown tool;
//   - serves resources/read (and resources/list) of the card, as text/html;profile=mcp-app,
//     to declaring hosts only (others keep -32601);
//   - adds the extension, and the resources capability the card's read needs, to
//     server/discover's capabilities of a declaring host.
//
// The card itself (card.html) is one self-contained HTML file built by `go generate` from
// card/ and committed; its own CSP allows only its inline script and style, by hash, and no
// network at all: it reaches jobgate only through the host bridge. The job core
// (frontend/jobcore/apps.go) gives the card its nonces and runs its decisions.
package mcpapp

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/frontend/jobcore"
)

//go:embed card.html
var cardHTML string

// CardHTML is the approval card's document.
func CardHTML() string { return cardHTML }

// cardResource is the card as resources/list shows it.
func cardResource() *mcp.Resource {
	return &mcp.Resource{URI: jobcore.ApprovalCardURI, Name: "approval_card", Title: "jobgate approval card",
		Description: "Shows an open approval request (what approving means, every scope field, sensitive columns marked, " +
			"the scope digest) and lets the person who may answer it approve or reject it.",
		MIMEType: jobcore.AppMIMEType}
}

// cardResult is resources/read of the card for a 2026-07-28 host. The go-sdk (v1.8.0) marks a
// read's result complete only in its own resource handler, and keeps resultType unexported:
// decoding it is the one way to set it (the 2026-07-28 TypeScript client refuses a result
// without it).
func cardResult() *mcp.ReadResourceResult {
	var r mcp.ReadResourceResult
	if err := json.Unmarshal([]byte(`{"resultType":"complete","contents":[]}`), &r); err != nil {
		panic(err) // a constant
	}
	r.Cacheable = mcp.Cacheable{CacheScope: "public"} // the same card for everyone; re-read each time (ttlMs 0)
	r.Contents = []*mcp.ResourceContents{{URI: jobcore.ApprovalCardURI, MIMEType: jobcore.AppMIMEType, Text: cardHTML,
		// No csp domains: the card connects nowhere and loads nothing (the restrictive default).
		Meta: mcp.Meta{"ui": map[string]any{"prefersBorder": true}}}}
	return &r
}

// Middleware is the MCP Apps surface for the MCP server: carded are the tools whose results the
// card shows (list_approvals and every get_*).
func Middleware(carded []string) mcp.Middleware {
	cards := map[string]bool{}
	for _, n := range carded {
		cards[n] = true
	}
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			declared := declares(req)
			switch method {
			case "tools/list":
				res, err := next(ctx, method, req)
				if lr, ok := res.(*mcp.ListToolsResult); ok && err == nil {
					return listTools(lr, declared, cards), nil
				}
				return res, err
			case "tools/call":
				if ctr, ok := req.(*mcp.CallToolRequest); ok && !declared && ctr.Params != nil && ctr.Params.Name == jobcore.DecideToolName {
					// What the SDK answers for a tool it does not have (go-sdk v1.8.0 server.go callTool).
					return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", ctr.Params.Name)}
				}
			case "resources/read":
				if rr, ok := req.(*mcp.ReadResourceRequest); ok && declared && rr.Params != nil && rr.Params.URI == jobcore.ApprovalCardURI {
					return cardResult(), nil
				}
				if declared {
					return nil, &jsonrpc.Error{Code: mcp.CodeResourceNotFound, Message: "Resource not found"}
				}
			case "resources/list":
				if declared {
					return &mcp.ListResourcesResult{Cacheable: mcp.Cacheable{CacheScope: "public"}, Resources: []*mcp.Resource{cardResource()}}, nil
				}
			case "server/discover":
				res, err := next(ctx, method, req)
				if d, ok := res.(*mcp.DiscoverResult); ok && err == nil && declared {
					d2 := *d
					caps := &mcp.ServerCapabilities{}
					if d.Capabilities != nil {
						*caps = *d.Capabilities
					}
					caps.Extensions = maps.Clone(caps.Extensions)
					caps.AddExtension(jobcore.AppsExtension, map[string]any{"mimeTypes": []string{jobcore.AppMIMEType}})
					if caps.Resources == nil {
						caps.Resources = &mcp.ResourceCapabilities{}
					}
					d2.Capabilities = caps
					return &d2, nil
				}
				return res, err
			}
			return next(ctx, method, req)
		}
	}
}

// declares: the request's own capabilities declare MCP Apps (2026-07-28 clients; see
// jobcore.DeclaresApps).
func declares(req mcp.Request) bool {
	p := req.GetParams()
	if p == nil || reflect.ValueOf(p).IsNil() { // a request without params: a nil pointer in the interface
		return false
	}
	return jobcore.DeclaresApps(p.GetMeta())
}

// listTools is tools/list for a host: without MCP Apps, the list without the app-only tool;
// with it, the carded tools naming the card. Tools are copied, never changed in place (the
// server's own are shared by every request).
func listTools(lr *mcp.ListToolsResult, declared bool, cards map[string]bool) *mcp.ListToolsResult {
	out := *lr
	out.Tools = make([]*mcp.Tool, 0, len(lr.Tools))
	for _, t := range lr.Tools {
		switch {
		case t.Name == jobcore.DecideToolName && !declared:
			continue
		case cards[t.Name] && declared:
			c := *t
			c.Meta = maps.Clone(t.Meta)
			if c.Meta == nil {
				c.Meta = mcp.Meta{}
			}
			c.Meta["ui"] = map[string]any{"resourceUri": jobcore.ApprovalCardURI}
			t = &c
		}
		out.Tools = append(out.Tools, t)
	}
	return &out
}

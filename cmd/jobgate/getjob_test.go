package main

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/frontend/wire"
)

// getJobServer is a go-sdk MCP server with get_<kind> tools answering from answers (a tool
// error or a job view per kind), connected in memory to a client as the CLI uses one. It
// records the tools called.
func getJobServer(t *testing.T, answers map[string]any) (*client, *[]string) {
	t.Helper()
	var calls []string
	s := mcp.NewServer(&mcp.Implementation{Name: "fake-jobgate", Version: "0"}, nil)
	for kind, answer := range answers {
		s.AddTool(&mcp.Tool{Name: "get_" + kind, InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				calls = append(calls, req.Params.Name)
				b, _ := json.Marshal(answer)
				if te, ok := answer.(*wire.ToolError); ok && te != nil {
					return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}, nil
				}
				return &mcp.CallToolResult{StructuredContent: json.RawMessage(b), Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}, nil
			})
	}
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return &client{cs: cs}, &calls
}

// TestGetJobFollowsErrorKind: getJob finds a handle's kind from the error's kind field alone,
// whatever the message says, and takes every other answer as final.
func TestGetJobFollowsErrorKind(t *testing.T) {
	evalView := wire.JobView{JobSummary: wire.JobSummary{Handle: "h", Kind: "eval", Status: "running"}}
	ctx := context.Background()

	t.Run("another kind", func(t *testing.T) {
		cl, calls := getJobServer(t, map[string]any{
			"export": &wire.ToolError{Code: wire.CodeInvalidArgument, Message: "prose that names no kind", Kind: "eval"},
			"eval":   evalView,
		})
		j, err := cl.getJob(ctx, "h")
		if err != nil || j.kind != "eval" || j.view.Kind != "eval" || len(*calls) != 2 {
			t.Fatalf("got %+v, %v after %v; want the eval job after get_export, get_eval", j, err, *calls)
		}
	})
	t.Run("no kind field is final", func(t *testing.T) {
		cl, calls := getJobServer(t, map[string]any{
			"export": &wire.ToolError{Code: wire.CodeInvalidArgument, Message: "handle: names a eval job; use the eval tools for it"},
			"eval":   evalView,
		})
		_, err := cl.getJob(ctx, "h")
		var te *wire.ToolError
		if !errors.As(err, &te) || te.Code != wire.CodeInvalidArgument || len(*calls) != 1 {
			t.Fatalf("got %v after %v; want get_export's error, and no message parsed", err, *calls)
		}
	})
	t.Run("the kind asked is final", func(t *testing.T) {
		cl, calls := getJobServer(t, map[string]any{
			"export": &wire.ToolError{Code: wire.CodeNotFound, Message: "no such job", Kind: "export"},
			"eval":   evalView,
		})
		_, err := cl.getJob(ctx, "h")
		var te *wire.ToolError
		if !errors.As(err, &te) || te.Code != wire.CodeNotFound || len(*calls) != 1 {
			t.Fatalf("got %v after %v; want not_found at once", err, *calls)
		}
	})
	t.Run("no loop", func(t *testing.T) {
		cl, calls := getJobServer(t, map[string]any{
			"export": &wire.ToolError{Code: wire.CodeInvalidArgument, Message: "x", Kind: "eval"},
			"eval":   &wire.ToolError{Code: wire.CodeInvalidArgument, Message: "x", Kind: "export"},
		})
		if _, err := cl.getJob(ctx, "h"); err == nil || len(*calls) != 2 {
			t.Fatalf("got %v after %v; want an error after each kind was asked once", err, *calls)
		}
	})
}

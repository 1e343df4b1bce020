package main

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
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

// TestGetJobFollowsErrorKind: getJob asks the first get_* tool the server lists (the SDK's
// server lists tools by name, so get_eval here), finds a handle's kind from the error's kind
// field alone, whatever the message says, and takes every other answer as final.
func TestGetJobFollowsErrorKind(t *testing.T) {
	evalView := wire.JobView{JobSummary: wire.JobSummary{Handle: "h", Kind: "eval", Status: "running"}}
	exportView := wire.JobView{JobSummary: wire.JobSummary{Handle: "h", Kind: "export", Status: "running"}}
	ctx := context.Background()

	t.Run("another kind", func(t *testing.T) {
		cl, calls := getJobServer(t, map[string]any{
			"eval":   &wire.ToolError{Code: wire.CodeInvalidArgument, Message: "prose that names no kind", Kind: "export"},
			"export": exportView,
		})
		j, err := cl.getJob(ctx, "h")
		if err != nil || j.kind != "export" || j.view.Kind != "export" || !slices.Equal(*calls, []string{"get_eval", "get_export"}) {
			t.Fatalf("got %+v, %v after %v; want the export job after get_eval, get_export", j, err, *calls)
		}
	})
	t.Run("no kind field is final", func(t *testing.T) {
		cl, calls := getJobServer(t, map[string]any{
			"eval":   &wire.ToolError{Code: wire.CodeInvalidArgument, Message: "handle: names a export job; use the export tools for it"},
			"export": exportView,
		})
		_, err := cl.getJob(ctx, "h")
		var te *wire.ToolError
		if !errors.As(err, &te) || te.Code != wire.CodeInvalidArgument || len(*calls) != 1 {
			t.Fatalf("got %v after %v; want get_eval's error, and no message parsed", err, *calls)
		}
	})
	t.Run("the kind asked is final", func(t *testing.T) {
		cl, calls := getJobServer(t, map[string]any{
			"eval":   &wire.ToolError{Code: wire.CodeNotFound, Message: "no such job", Kind: "eval"},
			"export": exportView,
		})
		_, err := cl.getJob(ctx, "h")
		var te *wire.ToolError
		if !errors.As(err, &te) || te.Code != wire.CodeNotFound || len(*calls) != 1 {
			t.Fatalf("got %v after %v; want not_found at once", err, *calls)
		}
	})
	t.Run("no loop", func(t *testing.T) {
		cl, calls := getJobServer(t, map[string]any{
			"eval":   &wire.ToolError{Code: wire.CodeInvalidArgument, Message: "x", Kind: "export"},
			"export": &wire.ToolError{Code: wire.CodeInvalidArgument, Message: "x", Kind: "eval"},
		})
		if _, err := cl.getJob(ctx, "h"); err == nil || len(*calls) != 2 {
			t.Fatalf("got %v after %v; want an error after each kind was asked once", err, *calls)
		}
	})
	// A server that serves only evals has no get_export: the first probe must be a tool it has.
	t.Run("eval-only server", func(t *testing.T) {
		cl, calls := getJobServer(t, map[string]any{"eval": evalView})
		j, err := cl.getJob(ctx, "h")
		if err != nil || j.kind != "eval" || j.view.Kind != "eval" || !slices.Equal(*calls, []string{"get_eval"}) {
			t.Fatalf("got %+v, %v after %v; want the eval job from get_eval alone", j, err, *calls)
		}
	})
	t.Run("no get tool", func(t *testing.T) {
		cl, calls := getJobServer(t, map[string]any{})
		if _, err := cl.getJob(ctx, "h"); err == nil || !strings.Contains(err.Error(), "no get_* tool") || len(*calls) != 0 {
			t.Fatalf("got %v after %v; want an error naming the missing get_* tool and no call", err, *calls)
		}
	})
}

package frontend

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// inputRequired is an MRTR answer to tools/call as the 2026-07-28 schema defines it
// (InputRequiredResult: resultType, inputRequests, requestState, _meta; no content). The SDK
// sends an input_required *mcp.CallToolResult with "content": null (its Content field has no
// omitempty, go-sdk v1.8.0 mcp/protocol.go), which is neither a CallToolResult (content is an
// array) nor an InputRequiredResult.
type inputRequired struct {
	mcp.ResultBase
	ResultType    string              `json:"resultType"`
	InputRequests mcp.InputRequestMap `json:"inputRequests,omitempty"`
	RequestState  string              `json:"requestState,omitempty"`
}

// inputRequiredWire is the outermost receiving middleware: a tools/call answer that asks for
// input goes out as inputRequired; everything else passes unchanged. (The middlewares inside
// it, e.g. the task answer of start_*, still see the SDK's *mcp.CallToolResult.)
func inputRequiredWire(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if ctr, ok := res.(*mcp.CallToolResult); ok && err == nil && ctr.NeedsInput() {
			ir := &inputRequired{ResultType: "input_required", InputRequests: ctr.InputRequests, RequestState: ctr.RequestState}
			ir.Meta = ctr.Meta
			return ir, nil
		}
		return res, err
	}
}

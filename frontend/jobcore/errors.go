package jobcore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/wire"
)

// Tool error codes (CONTRACT.md), defined with the error's JSON shape in package wire. What a
// model can act on is a tool error; infrastructure faults other than "Temporal unreachable" are
// Go errors and become JSON-RPC errors.
const (
	CodeInvalidArgument      = wire.CodeInvalidArgument
	CodeNotFound             = wire.CodeNotFound
	CodeInvalidHandle        = wire.CodeInvalidHandle
	CodeHandleExpired        = wire.CodeHandleExpired
	CodeIdempotencyKeyReused = wire.CodeIdempotencyKeyReused
	CodeInputNotExpected     = wire.CodeInputNotExpected
	CodeForbidden            = wire.CodeForbidden
	CodeCursorInvalid        = wire.CodeCursorInvalid
	CodeCursorExpired        = wire.CodeCursorExpired
	CodeUnavailable          = wire.CodeUnavailable
	CodeQuotaExceeded        = wire.CodeQuotaExceeded
)

// ToolError is the JSON text of every isError tool result (wire.ToolError).
type ToolError = wire.ToolError

func ToolErr(code, format string, args ...any) *ToolError {
	return &ToolError{Code: code, Message: fmt.Sprintf(format, args...), Retryable: code == CodeUnavailable}
}

// invalidArg names the field that failed validation.
func invalidArg(field, format string, args ...any) *ToolError {
	return &ToolError{Code: CodeInvalidArgument, Message: field + ": " + fmt.Sprintf(format, args...)}
}

// errNotFound is byte-identical for unknown jobs and jobs the caller may not see.
func ErrNotFound() *ToolError {
	return &ToolError{Code: CodeNotFound, Message: "no such job"}
}

// isUnavailable reports the job store being unreachable or overloaded (the store marks it), or
// a call of the core running out of time.
func isUnavailable(err error) bool {
	return errors.Is(err, jobstore.ErrStoreUnavailable) || errors.Is(err, context.DeadlineExceeded)
}

// asToolError turns an error into a tool error where the model can act on it.
func AsToolError(err error) (*ToolError, bool) {
	var te *ToolError
	if errors.As(err, &te) {
		return te, true
	}
	if errors.Is(err, jobstore.ErrTenantForgotten) {
		// The caller's own tenant: telling them says nothing about anyone else.
		return &ToolError{Code: CodeForbidden, Message: "this tenant's data has been deleted (forgotten): no job starts for it"}, true
	}
	if isUnavailable(err) {
		return &ToolError{Code: CodeUnavailable, Message: "the job store (Temporal) is unreachable or overloaded; retry shortly", Retryable: true}, true
	}
	return nil, false
}

// errorResult renders a tool error as an isError result whose only content is the error's JSON
// as text. It carries no structuredContent: clients (the official TypeScript SDK among them)
// validate structuredContent against the tool's output schema even on errors, and the error
// shape is not the tool's output shape.
func ErrorResult(te *ToolError) *mcp.CallToolResult {
	b, _ := json.Marshal(te)
	return &mcp.CallToolResult{
		IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: string(b)}},
	}
}

// ParseResult reads a tool result as clients must (wire.ParseResult).
func ParseResult(res *mcp.CallToolResult, out any) (*ToolError, error) {
	return wire.ParseResult(res, out)
}

func okResult(v any) (*mcp.CallToolResult, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("marshal tool output: %w", err)
	}
	text := string(b)
	if t, ok := v.(toolTexter); ok {
		if s, ok := t.ToolText(); ok {
			text = s
		}
	}
	return &mcp.CallToolResult{
		StructuredContent: json.RawMessage(b),
		Content:           []mcp.Content{&mcp.TextContent{Text: text}},
	}, nil
}

// toolTexter is an output whose text content is its own words rather than its JSON (the
// conformance fixtures' answers, "Hello, World!"); structuredContent stays the JSON.
type toolTexter interface {
	ToolText() (string, bool)
}

// The views that answer in words, checked here: okResult finds them by a type assertion, which
// a renamed method would fail silently.
var (
	_ toolTexter = FixtureResultView{}
	_ toolTexter = (*KindView[FixtureResultView])(nil)
)

package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/api/serviceerror"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Tool error codes (CONTRACT.md). What a model can act on is a tool error; infrastructure
// faults other than "Temporal unreachable" are Go errors and become JSON-RPC errors.
const (
	CodeInvalidArgument      = "invalid_argument"
	CodeNotFound             = "not_found"
	CodeInvalidHandle        = "invalid_handle"
	CodeHandleExpired        = "handle_expired"
	CodeIdempotencyKeyReused = "idempotency_key_reused"
	CodeInputNotExpected     = "input_not_expected"
	CodeForbidden            = "forbidden"
	CodeCursorInvalid        = "cursor_invalid"
	CodeCursorExpired        = "cursor_expired"
	CodeUnavailable          = "unavailable"
	CodeQuotaExceeded        = "quota_exceeded"
)

// ToolError is the JSON text of every isError tool result.
type ToolError struct {
	Code      string `json:"code" jsonschema:"machine-readable error code"`
	Message   string `json:"message" jsonschema:"what went wrong and what to do about it"`
	Retryable bool   `json:"retryable" jsonschema:"true when the same call may succeed later unchanged"`
	// RetryAfterMS is set on quota_exceeded when it is known when the same call can pass.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty" jsonschema:"milliseconds until the same call can pass, when known"`
	// Kind is the kind of job the error concerns, so no client has to read it out of Message:
	// the kind of the tool called (start_eval, get_export, …), except where a handle names a job
	// of another kind, when it is that job's kind (whose tools to use instead). It names no more
	// than the call did, or than the verified handle does, so a not_found stays byte-identical for
	// unknown and invisible jobs. Absent on tools of no single kind (list_jobs, list_approvals).
	Kind string `json:"kind,omitempty" jsonschema:"the job kind the error concerns (eval, export); when a handle names a job of another kind, that kind"`
}

func (e *ToolError) Error() string {
	if e.RetryAfterMS > 0 {
		return fmt.Sprintf("%s: %s (retry after %s)", e.Code, e.Message, time.Duration(e.RetryAfterMS)*time.Millisecond)
	}
	return e.Code + ": " + e.Message
}

func toolErr(code, format string, args ...any) *ToolError {
	return &ToolError{Code: code, Message: fmt.Sprintf(format, args...), Retryable: code == CodeUnavailable}
}

// invalidArg names the field that failed validation.
func invalidArg(field, format string, args ...any) *ToolError {
	return &ToolError{Code: CodeInvalidArgument, Message: field + ": " + fmt.Sprintf(format, args...)}
}

// errNotFound is byte-identical for unknown jobs and jobs the caller may not see.
func errNotFound() *ToolError {
	return &ToolError{Code: CodeNotFound, Message: "no such job"}
}

// isUnavailable reports Temporal being unreachable or overloaded.
func isUnavailable(err error) bool {
	var (
		u  *serviceerror.Unavailable
		re *serviceerror.ResourceExhausted
		de *serviceerror.DeadlineExceeded
	)
	if errors.As(err, &u) || errors.As(err, &re) || errors.As(err, &de) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted:
		return true
	}
	return false
}

// asToolError turns an error into a tool error where the model can act on it.
func asToolError(err error) (*ToolError, bool) {
	var te *ToolError
	if errors.As(err, &te) {
		return te, true
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
func errorResult(te *ToolError) *mcp.CallToolResult {
	b, _ := json.Marshal(te)
	return &mcp.CallToolResult{
		IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: string(b)}},
	}
}

// ParseResult reads a tool result as clients must: an isError result's tool error from its
// text content (returned as *ToolError), otherwise structuredContent decoded into out. The
// error is for results that fit neither shape.
func ParseResult(res *mcp.CallToolResult, out any) (*ToolError, error) {
	if res == nil {
		return nil, errors.New("no result")
	}
	if res.IsError {
		var te ToolError
		if len(res.Content) == 1 {
			if tc, ok := res.Content[0].(*mcp.TextContent); ok && json.Unmarshal([]byte(tc.Text), &te) == nil && te.Code != "" {
				return &te, nil
			}
		}
		return nil, fmt.Errorf("tool error without a jobgate error body: %s", contentText(res))
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return nil, fmt.Errorf("unexpected result %s: %w", raw, err)
	}
	return nil, nil
}

func contentText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, " ")
}

func okResult(v any) (*mcp.CallToolResult, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("marshal tool output: %w", err)
	}
	return &mcp.CallToolResult{
		StructuredContent: json.RawMessage(b),
		Content:           []mcp.Content{&mcp.TextContent{Text: string(b)}},
	}, nil
}

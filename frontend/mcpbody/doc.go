// Package mcpbody is the front door's one parse of an MCP request body (Parse): strict JSON
// — no duplicate keys, no trailing bytes, valid UTF-8, bounded depth — so that every layer in
// front of the SDK (scope checks, Tasks, listen) reads exactly what the SDK will run, and a
// body the two could read differently is refused before any of them looks at it.
//
// It imports only wire; never the frontend, a store or a Temporal package.
package mcpbody

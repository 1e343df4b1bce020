// Command lbproxy is the chaos suite's load balancer: a round-robin reverse proxy over jobgate
// frontends, run as a process of its own. Consecutive requests go to different backends; a
// backend that refuses connections (killed) is skipped for that request, which is safe because
// the request never reached it. POST /__lb/drop closes every client connection at once (a
// connection storm); GET /__lb/stats reports requests per backend. Answers are passed on as they
// arrive (flushed after every read), so Server-Sent Event streams reach the client event by event.
//
// The cluster and chaos tests and the PostgreSQL test build it, run it as
// `lbproxy -listen ADDR -backends URL,URL` in front of two `jobgate serve` processes and point
// their MCP clients at it; its stats prove that calls were really spread over both replicas.
//
// It imports only the standard library, never a jobgate package.
package main

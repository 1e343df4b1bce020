// Command probe is the container health check of the jobgate image. The image is distroless
// (no shell, no curl), so Docker's HEALTHCHECK needs a binary of its own:
//
//	probe URL...   exit 0 if every URL answers GET with a 2xx within the timeout, else 1
//
// The compose file checks a frontend with its /healthz and /readyz, a worker with its /metrics
// listener. It follows no redirects and reads at most 4 KiB of the answer. Kubernetes does not need it
// (httpGet probes do the same); it exists for docker compose and plain `docker run`.
//
// Usage: probe [-timeout 3s] URL... (exit 2 without a URL). It sends nothing but GET, carries
// no credentials, and exits 1 at the first URL that fails, naming it and its status on stderr.
//
// It imports only the standard library, never a jobgate package: the image's health check stays
// a tiny binary.
package main

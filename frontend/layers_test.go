package frontend

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobgate/jobgate/tests/support/testenv"
)

// TestLayers pins who may import what under frontend/ (each package's doc.go says why): the
// job store's types know no store, quotas know no Temporal, and only the Temporal store calls
// Temporal's services or reads its errors. The job core names client.Client once, in Options
// (core.go), for the edge to hand it to the Temporal store; the core never imports the edge.
func TestLayers(t *testing.T) {
	const mod = "github.com/jobgate/jobgate/"
	temporalCalls := []string{"go.temporal.io/api/workflowservice/", "go.temporal.io/api/serviceerror", "go.temporal.io/sdk/client"}
	frontendPkgs := []string{mod + "frontend", mod + "frontend/temporalstore", mod + "frontend/quota", mod + "frontend/jobstore/memstore", mod + "frontend/pages"}
	rules := map[string][]string{ // directory → forbidden import prefixes (exact for frontend's own packages)
		".":                 {mod + "tests/support/testenv", mod + "frontend/jobstore/memstore"},
		"jobstore":          append(append([]string{}, temporalCalls...), frontendPkgs...),
		"jobstore/memstore": {mod + "frontend", mod + "frontend/quota", mod + "frontend/pages", "go.temporal.io/sdk/client"},
		"quota":             {"go.temporal.io/", mod + "frontend", mod + "frontend/temporalstore", mod + "frontend/jobstore/memstore"},
		"temporalstore":     {mod + "frontend", mod + "frontend/quota", mod + "frontend/pages", mod + "frontend/jobstore/memstore"},
		"handle/resumeseal": {mod + "frontend", "go.temporal.io/"},
		"telemetry":         {mod + "frontend", mod + "frontend/temporalstore", "go.temporal.io/"},
		"mcpbody":           {mod + "frontend", mod + "authz", mod + "workflows", "go.temporal.io/"},
		"jobcore":           {mod + "frontend", mod + "frontend/temporalstore", mod + "frontend/mcpbody", mod + "frontend/jobstore/memstore"},
		"events":            {mod + "frontend", mod + "frontend/temporalstore", mod + "frontend/quota", "go.temporal.io/"},
		"wire":              {mod + "frontend", "go.temporal.io/"},
		"wire/scorehist":    {mod, "go.temporal.io/"}, // a leaf: the pages and the CLI draw the same histogram
		"pages":             temporalCalls,
		// The MCP Apps card: the job core's names, the SDK; never Temporal, the store or the edge.
		"mcpapp": append(append([]string{"go.temporal.io/"}, mod+"frontend", mod+"frontend/temporalstore", mod+"frontend/jobstore/memstore"), mod+"frontend/quota"),
		// The codec server knows payloadcrypt and authz: no Temporal service, no job store.
		"codecserver": append(append([]string{}, temporalCalls...), mod+"frontend", mod+"frontend/jobcore", mod+"frontend/temporalstore", mod+"frontend/jobstore"),
	}
	for dir, forbidden := range rules {
		for f, ps := range testenv.Imports(t, dir, false) {
			for _, p := range ps {
				for _, bad := range forbidden {
					own := strings.HasPrefix(bad, mod+"frontend")
					if (own && p == bad) || (!own && strings.HasPrefix(p, bad)) {
						t.Errorf("%s imports %s: package %s must not", f, p, dir)
					}
				}
				if dir != "temporalstore" && !(dir == "jobcore" && filepath.Base(f) == "core.go" && p == "go.temporal.io/sdk/client") {
					for _, c := range temporalCalls {
						if strings.HasPrefix(p, c) {
							t.Errorf("%s imports %s: only frontend/temporalstore calls Temporal", f, p)
						}
					}
				}
			}
		}
	}
}

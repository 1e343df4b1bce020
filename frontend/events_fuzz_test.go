package frontend

import (
	"flag"
	"path/filepath"
	"testing"

	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/mcpbody"
	"github.com/jobgate/jobgate/tests/support/testenv"
)

var updateEventSeeds = flag.Bool("update-event-seeds", false, "rewrite testdata/fuzz/FuzzListenRequest")

// listenSeeds are FuzzListenRequest's seeds (committed under testdata/fuzz; regenerate with
// go test ./frontend -run TestListenSeedCorpus -update-event-seeds).
var listenSeeds = map[string]string{
	"two_tasks":     `{"jsonrpc":"2.0","id":7,"method":"subscriptions/listen","params":{"notifications":{"taskIds":["jgh1.a","jgh1.b"]}}}`,
	"no_task_ids":   `{"jsonrpc":"2.0","id":7,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true}}}`,
	"empty_ids":     `{"jsonrpc":"2.0","id":7,"method":"subscriptions/listen","params":{"notifications":{"taskIds":[]}}}`,
	"null_ids":      `{"jsonrpc":"2.0","id":7,"method":"subscriptions/listen","params":{"notifications":{"taskIds":null}}}`,
	"numbers":       `{"jsonrpc":"2.0","id":7,"method":"subscriptions/listen","params":{"notifications":{"taskIds":[1,2]}}}`,
	"nested":        `{"jsonrpc":"2.0","id":"x","method":"subscriptions/listen","params":{"notifications":{"taskIds":[["a"]]}}}`,
	"no_params":     `{"jsonrpc":"2.0","id":7,"method":"subscriptions/listen"}`,
	"notifications": `{"jsonrpc":"2.0","id":7,"method":"subscriptions/listen","params":{"notifications":"taskIds"}}`,
	"unicode":       `{"jsonrpc":"2.0","id":7,"method":"subscriptions/listen","params":{"notifications":{"taskIds":["\u0000","é"]}}}`,
}

func TestListenSeedCorpus(t *testing.T) {
	testenv.SeedCorpus(t, filepath.Join("testdata", "fuzz", "FuzzListenRequest"), listenSeeds, *updateEventSeeds, true)
}

// FuzzListenRequest: whatever a subscriptions/listen body holds, reading its taskIds never
// panics, and says either "not asked" (the SDK's to answer), a reason it is bad, or 1 to
// handle.MaxEventPosJobs task ids.
func FuzzListenRequest(f *testing.F) {
	for _, s := range listenSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		pb := mcpbody.Parse([]byte(body))
		req, ok := rpcRequestOf(pb)
		if !ok {
			return
		}
		ids, asks, bad := listenTaskIDs(req)
		switch {
		case !asks && (ids != nil || bad != ""):
			t.Fatalf("not asked, yet ids %q bad %q", ids, bad)
		case asks && bad == "" && (len(ids) == 0 || len(ids) > handle.MaxEventPosJobs):
			t.Fatalf("accepted %d task ids", len(ids))
		case asks && bad != "" && ids != nil:
			t.Fatalf("bad (%s) with ids %q", bad, ids)
		}
	})
}

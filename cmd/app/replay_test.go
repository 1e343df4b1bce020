package app

import (
	"os"
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/client"
)

// TestReplayCommittedHistories replays committed histories through the command's replayer
// (registered by the worker's calls). Under -tags jobgate_breaking_change they fail, and the
// diverging event is located (run it so to see the report).
func TestReplayCommittedHistories(t *testing.T) {
	r, _, err := newReplayer()
	if err != nil {
		t.Fatal(err)
	}
	for file, id := range map[string]string{"export_v2.json": "acme/export/replay", "eval_small.json": "acme/eval/replay-small",
		"export_reask.json": "acme/export/replay"} {
		f, err := os.Open(filepath.Join("..", "..", "workflows", "testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		hist, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		ev, typ, err := replayLocated(r, hist, id, "")
		if breakingBuild {
			if err == nil || ev == 0 {
				t.Errorf("%s: breaking build replayed (err %v, event %d)", file, err, ev)
			}
			t.Logf("%s: diverged at event %d %s: %v", file, ev, typ, err)
		} else if err != nil {
			t.Errorf("%s: %v (event %d %s)", file, err, ev, typ)
		}
	}
}

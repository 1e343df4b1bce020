package replay

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
	r, _, err := newReplayer(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for file, id := range map[string]string{"export_v2.json": "acme/export/replay", "eval_small.json": "acme/eval/replay-small",
		"export_reask.json": "acme/export/replay", "eval_progress_run1.json": "acme/eval/replay-progress"} {
		f, err := os.Open(filepath.Join("..", "..", "..", "workflows", "testdata", file))
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
	if breakingBuild {
		return // the breaking change is in the job workflows; the notifier's history still replays
	}
	// The job.progress notifier (workflows/testdata/genprogress) replays through the same
	// registration.
	f, err := os.Open(filepath.Join("..", "..", "..", "workflows", "testdata", "notify_progress.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	hist, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ev, typ, err := replayLocated(r, hist, "acme/eval/replay-progress/progress/01a23b17-127e-746f-9dce-f459d948928c", ""); err != nil {
		t.Errorf("notify_progress.json: %v (event %d %s)", err, ev, typ)
	}
}

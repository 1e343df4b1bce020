package tests

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/workflows"
)

// TestEpisodeLogRetention (issue 35 §3): an eval's episode log is kept for its suite's
// episode_retention (here 4 s; default 30 days), like an export's artifact for its dataset's
// retention: get_eval says until when, the retention child the run leaves behind deletes the
// log from the artifact store once it expires, and then get_eval says so (no episodes_url, the
// summary kept) and list_episodes answers why instead of "retry".
func TestEpisodeLogRetention(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{suitesJSON: `{"suites":[{"name":"brief","kind":"demo","episode_retention":"4s"}]}`})
	cs := b.session(ana, 0, "")
	args := startArgs(uniqueKey(t), 5, map[string]any{"episode_ms": 20, "fail_rate": 0})
	args["suite"] = "brief"
	v := mustView(t, call(t, cs, "start_eval", args))
	done := waitStatus(t, cs, v.Handle, workflows.StatusSucceeded, time.Minute)
	var res struct {
		Scored            int        `json:"scored"`
		EpisodesURL       string     `json:"episodes_url"`
		EpisodesKeptUntil *time.Time `json:"episodes_kept_until"`
		EpisodesExpired   bool       `json:"episodes_expired"`
	}
	raw, _ := json.Marshal(done.Result)
	must(t, json.Unmarshal(raw, &res))
	if res.EpisodesKeptUntil == nil || res.EpisodesURL == "" || res.EpisodesExpired {
		t.Fatalf("fresh eval: %s; want episodes_kept_until and an episodes_url", raw)
	}
	if d := res.EpisodesKeptUntil.Sub(done.UpdatedAt); d < 3*time.Second || d > 30*time.Second {
		t.Errorf("episodes_kept_until %s is %s after the run ended (%s), want about the suite's 4s", res.EpisodesKeptUntil, d, done.UpdatedAt)
	}
	if page := epPage(t, cs, map[string]any{"handle": v.Handle}); len(page.Episodes) != 5 || !page.Complete {
		t.Fatalf("list_episodes before retention: %d episodes, complete %v", len(page.Episodes), page.Complete)
	}
	dir := filepath.Join(strings.TrimPrefix(b.artifacts, "file://"), "episodes")
	if countFiles(t, dir) == 0 {
		t.Fatal("no episode log in the artifact store")
	}
	eventually(t, time.Minute, "the retention child to delete the episode log", func() bool { return countFiles(t, dir) == 0 })

	after := mustView(t, call(t, cs, "get_eval", map[string]any{"handle": v.Handle}))
	raw, _ = json.Marshal(after.Result)
	res.EpisodesURL, res.EpisodesExpired = "", false
	must(t, json.Unmarshal(raw, &res))
	if !res.EpisodesExpired || res.EpisodesURL != "" || res.Scored != 5 {
		t.Errorf("expired eval: %s; want episodes_expired, no episodes_url, the summary kept", raw)
	}
	_, te, _ := epCall(t, cs, map[string]any{"handle": v.Handle})
	if te == nil || te.Code != "invalid_argument" || !strings.Contains(te.Message, "episode_retention") || te.Retryable {
		t.Errorf("list_episodes past retention: %+v, want a final invalid_argument naming episode_retention", te)
	}
}

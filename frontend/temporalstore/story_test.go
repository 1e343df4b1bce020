package temporalstore

import (
	"os"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/workflows"
)

// narrate tells committed replay histories (workflows/testdata) as describe_job would,
// the runs in order, so the narrator is tested on real Temporal histories without a server.
func narrate(t *testing.T, kind string, full bool, errCode string, files ...string) *jobstore.StoryResult {
	t.Helper()
	k, _ := workflows.LookupKind(kind)
	n := newNarrator(k.Story, defaultDC, jobstore.StoryRequest{MaxLines: 200, Full: full, JobErrCode: errCode})
	for _, name := range files {
		fh, err := os.Open("../../workflows/testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		h, err := client.HistoryFromJSON(fh, client.HistoryJSONOptions{})
		fh.Close()
		if err != nil {
			t.Fatal(err)
		}
		n.res.Runs++
		for _, ev := range h.GetEvents() {
			n.res.Events++
			n.event(ev)
		}
	}
	return n.finish()
}

func storyText(st *jobstore.StoryResult) string {
	var b strings.Builder
	for _, l := range st.Lines {
		b.WriteString(l.Text + "\n")
	}
	return b.String()
}

func TestStoryExportApproved(t *testing.T) {
	st := narrate(t, workflows.KindExport, false, "", "export_v2.json")
	txt := storyText(st)
	for _, want := range []string{"started by ", "dataset ", "waiting for approval (approver: ", "approved by ",
		"parts 1–3 succeeded", "finalize 1 succeeded", "started child workflow "} {
		if !strings.Contains(txt, want) {
			t.Errorf("story lacks %q:\n%s", want, txt)
		}
	}
	if !strings.HasSuffix(txt, "\nsucceeded\n") {
		t.Errorf("story does not end succeeded:\n%s", txt)
	}
	if st.Cut != "" {
		t.Errorf("cut = %q, want nothing cut", st.Cut)
	}
}

func TestStoryEvalContinueAsNewAndRetry(t *testing.T) {
	for _, full := range []bool{false, true} {
		st := narrate(t, workflows.KindEval, full, "", "eval_can_run1.json", "eval_can_run2.json")
		txt := storyText(st)
		for _, want := range []string{"started by ", "suite ", "run 1 continued as new", "run 2 began (continue-as-new)", "continued at episode"} {
			if !strings.Contains(txt, want) {
				t.Errorf("full=%v: story lacks %q:\n%s", full, want, txt)
			}
		}
		if st.Runs != 2 {
			t.Errorf("runs = %d", st.Runs)
		}
	}
}

func TestStoryCancelled(t *testing.T) {
	txt := storyText(narrate(t, workflows.KindEval, false, "cancelled", "eval_cancelled.json"))
	if !strings.Contains(txt, "cancel requested") || !strings.Contains(txt, "\ncancelled (cancelled)\n") {
		t.Errorf("story lacks the cancel request:\n%s", txt)
	}
}

// TestStoryBufCuts: a timeline longer than max_lines keeps its first and last lines and says
// how many were left out between them.
func TestStoryBufCuts(t *testing.T) {
	b := storyBuf{max: 10}
	for i := range 25 {
		b.add(wire.StoryLine{Text: strings.Repeat("x", i)})
	}
	lines, cut := b.lines()
	if len(lines) != 11 || cut == "" || lines[5].Text != "… 15 lines left out …" || len(lines[0].Text) != 0 || len(lines[10].Text) != 24 || len(lines[6].Text) != 20 {
		t.Fatalf("lines %d, cut %q: %+v", len(lines), cut, lines)
	}
	b = storyBuf{max: 10}
	for range 10 {
		b.add(wire.StoryLine{Text: "y"})
	}
	if lines, cut := b.lines(); len(lines) != 10 || cut != "" {
		t.Fatalf("no cut expected: %d %q", len(lines), cut)
	}
}

func TestStoryPrint(t *testing.T) {
	if os.Getenv("STORY_PRINT") == "" {
		t.Skip()
	}
	t.Log("\n" + storyText(narrate(t, workflows.KindExport, true, "", "export_v2.json")))
	t.Log("\n" + storyText(narrate(t, workflows.KindEval, true, "", "eval_can_run1.json", "eval_can_run2.json")))
	t.Log("\n" + storyText(narrate(t, workflows.KindEval, false, "cancelled", "eval_cancelled.json")))
}

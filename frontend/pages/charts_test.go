package pages

import (
	"net/http/httptest"
	"strings"
	"testing"
)

func score(f float64) *float64 { return &f }

// TestEvalCharts: the numbers behind an eval's pictures (outcomes with the episodes not yet
// finished, the histogram's bins, the run's last row) and an export's parts, rendered into the
// job page as inline SVG with titles and descriptions, and no script.
func TestEvalCharts(t *testing.T) {
	e := &Episodes{Total: 10, Outcomes: []Outcome{
		{Status: "passed", Score: score(0.9)}, {Status: "failed", Score: score(0.1)}, {Status: "errored"}, {Status: "passed", Score: score(0.95)}}}
	c := evalChartsOf(e)
	if c.Outcome.Desc != "Of 10 episodes: 2 passed, 1 failed, 1 errored, 6 not finished." {
		t.Errorf("outcomes: %q", c.Outcome.Desc)
	}
	if len(c.Outcome.Segments) != 4 || c.Outcome.Segments[3].W != chartW*0.6 {
		t.Errorf("outcome segments: %+v", c.Outcome.Segments)
	}
	if c.Hist == nil || c.Hist.N != "3" || c.Hist.Rows[1].Count != "1" || c.Hist.Rows[9].Count != "2" {
		t.Errorf("histogram: %+v", c.Hist)
	}
	if last := c.Progress.Rows[len(c.Progress.Rows)-1]; last.Done != "4" || last.PassRate != "50%" || last.Mean != "0.65" {
		t.Errorf("the run's last row: %+v", last)
	}
	if evalChartsOf(&Episodes{Total: 5}).Hist != nil {
		t.Error("a histogram without scores")
	}
	p := partsOf([]Part{{Part: 1, Rows: 1500, Bytes: 100, SHA256: `<b>"x"`}, {Part: 2, Rows: 500, Bytes: 50, SHA256: "ab"}})
	if p.Desc != "2 parts with 2,000 rows in all; the largest holds 1,500." || p.Bars[1].W != p.Bars[0].W/3 {
		t.Errorf("parts: %+v", p)
	}

	rec := httptest.NewRecorder()
	if err := render(rec, 200, "job", view{Title: "Job", Job: &jobView{JobID: "acme/eval/ana/k", Kind: "eval", Charts: c, Parts: p}}); err != nil {
		t.Fatal(err)
	}
	body := rec.Body.String()
	for _, want := range []string{`<svg class="chart" viewBox="0 -1 400 34" role="img" aria-labelledby="outcomes-t outcomes-d">`,
		`<desc id="hist-d">Histogram of 3 scores from 0 to 1 in 10 bins`, `<title id="run-t">Mean score and pass rate as episodes finished: 4 of 10</title>`,
		`<td data-label="SHA-256"><code>&lt;b&gt;&#34;x&#34;</code></td>`, `<title>scores 0.9–1: 2 episodes</title>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the job page lacks %s", want)
		}
	}
	if strings.Contains(body, "<script") || strings.Count(body, `class="chart"`) != 4 {
		t.Errorf("want 4 charts and no script:\n%s", body)
	}
}

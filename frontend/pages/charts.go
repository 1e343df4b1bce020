package pages

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jobgate/jobgate/frontend/wire/scorehist"
)

// The pictures of a job's page (issue 35): drawn on the server as inline SVG (no script, nothing
// fetched, so the pages' Content-Security-Policy default-src 'none' holds), each with a title
// and description for screen readers and its numbers as a table beside it.
//
//   - an eval: the score distribution (the same ten bins `jobgate jobs get` draws as a
//     sparkline, scorehist), passed/failed/errored (and not yet finished) as one bar, and how
//     the run went in the order its episodes finished (the running mean score and pass rate
//     against episodes finished, out of those asked for) from the episode log, while it runs too;
//   - an export: its parts, each with its rows, bytes and digest, and their rows as bars.

// Episodes is what an eval's page draws from its episode log: plain data from the job core.
type Episodes struct {
	// Total is how many episodes the run was asked for.
	Total int
	// Outcomes are the finished episodes in the order they finished (at most EpisodesShown).
	Outcomes []Outcome
	// Cut: the log holds more than Outcomes.
	Cut bool
}

// EpisodesShown is the most episodes a job page reads from the log.
const EpisodesShown = 10000

// Outcome is one finished episode: "passed", "failed" or "errored", and its score if it has one.
type Outcome struct {
	Status string
	Score  *float64
}

// Part is one part of an export's file.
type Part struct {
	Part   int
	Rows   int
	Bytes  int64
	SHA256 string
}

// chartW and chartH are the drawing area of every chart (the SVG's viewBox); the SVG scales to
// the page's width.
const (
	chartW, chartH = 400.0, 200.0
	padL, padB     = 36.0, 28.0
)

// histView is the score histogram.
type histView struct {
	Bars             []barView
	MaxLabel, N      string
	XLabels          []labelView
	Desc, Mean       string
	Rows             []histRow
	AxisY0, AxisYTop float64
}

type barView struct {
	X, Y, W, H float64
	Fill       string
	Title      string
}

type labelView struct {
	X, Y   float64
	Text   string
	Anchor string
}

type histRow struct{ Range, Count string }

// outcomeView is passed/failed/errored/not yet as one bar.
type outcomeView struct {
	Segments []barView
	Legend   []legendView
	Desc     string
}

type legendView struct {
	Fill  string
	Label string
}

// progressView is the run in finishing order.
type progressView struct {
	MeanPath, PassPath string
	XLabels            []labelView
	Desc               string
	Done, Total        string
	Rows               []progressRow
}

type progressRow struct{ Done, Mean, PassRate string }

// evalCharts are an eval page's three pictures.
type evalCharts struct {
	Hist     *histView
	Outcome  outcomeView
	Progress *progressView
	Cut      string
}

// Colours with a contrast of at least 3:1 against white (WCAG 1.4.11) and told apart by the
// legend's words, never by colour alone.
const (
	fillPassed  = "#1a7f37"
	fillFailed  = "#b35900"
	fillErrored = "#b00020"
	fillPending = "#d0d7de"
	fillBar     = "#0645ad"
)

func num(f float64) string { return strconv.FormatFloat(f, 'g', 3, 64) }

func evalChartsOf(e *Episodes) *evalCharts {
	if e == nil {
		return nil
	}
	c := &evalCharts{}
	var scores []float64
	counts := map[string]int{}
	for _, o := range e.Outcomes {
		counts[o.Status]++
		if o.Score != nil {
			scores = append(scores, *o.Score)
		}
	}
	if e.Cut {
		c.Cut = "The pictures show the first " + GroupDigits(int64(len(e.Outcomes))) + " episodes to finish."
	}
	c.Outcome = outcomeOf(counts, max(e.Total, len(e.Outcomes)))
	if h := scorehist.Of(scores, scorehist.Bins); h.N > 0 {
		c.Hist = histOf(h)
	}
	if len(e.Outcomes) > 0 {
		c.Progress = runOf(e.Outcomes, max(e.Total, len(e.Outcomes)))
	}
	return c
}

func histOf(h scorehist.Hist) *histView {
	v := &histView{N: GroupDigits(int64(h.N)), Mean: num(h.Mean), MaxLabel: strconv.Itoa(h.Max()),
		AxisY0: chartH - padB, AxisYTop: 8}
	plotW, plotH := chartW-padL-8, chartH-padB-8
	w := plotW / float64(len(h.Counts))
	tallest := float64(max(h.Max(), 1))
	for i, n := range h.Counts {
		bh := plotH * float64(n) / tallest
		rng := num(h.Edge(i)) + "–" + num(h.Edge(i+1))
		v.Bars = append(v.Bars, barView{X: padL + float64(i)*w + 1, Y: chartH - padB - bh, W: w - 2, H: bh, Fill: fillBar,
			Title: fmt.Sprintf("scores %s: %d episode%s", rng, n, plural(n))})
		v.Rows = append(v.Rows, histRow{Range: rng, Count: strconv.Itoa(n)})
	}
	for _, i := range []int{0, len(h.Counts) / 2, len(h.Counts)} {
		v.XLabels = append(v.XLabels, labelView{X: padL + float64(i)*w, Y: chartH - 8, Text: num(h.Edge(i)), Anchor: "middle"})
	}
	tallestBin := 0
	for i, n := range h.Counts {
		if n > h.Counts[tallestBin] {
			tallestBin = i
		}
	}
	v.Desc = fmt.Sprintf("Histogram of %d scores from %s to %s in %d bins; mean %s; the tallest bin, %s–%s, holds %d.",
		h.N, num(h.Lo), num(h.Hi), len(h.Counts), num(h.Mean), num(h.Edge(tallestBin)), num(h.Edge(tallestBin+1)), h.Counts[tallestBin])
	return v
}

func outcomeOf(counts map[string]int, total int) outcomeView {
	pending := max(total-counts["passed"]-counts["failed"]-counts["errored"], 0)
	parts := []struct {
		label, fill string
		n           int
	}{{"passed", fillPassed, counts["passed"]}, {"failed", fillFailed, counts["failed"]}, {"errored", fillErrored, counts["errored"]},
		{"not finished", fillPending, pending}}
	var v outcomeView
	x := 0.0
	var words []string
	for _, p := range parts {
		words = append(words, fmt.Sprintf("%d %s", p.n, p.label))
		v.Legend = append(v.Legend, legendView{Fill: p.fill, Label: fmt.Sprintf("%s %s", GroupDigits(int64(p.n)), p.label)})
		if p.n == 0 || total == 0 {
			continue
		}
		w := chartW * float64(p.n) / float64(total)
		v.Segments = append(v.Segments, barView{X: x, Y: 0, W: w, H: 32, Fill: p.fill,
			Title: fmt.Sprintf("%d %s (%s%%)", p.n, p.label, num(100*float64(p.n)/float64(total)))})
		x += w
	}
	v.Desc = fmt.Sprintf("Of %d episodes: %s.", total, strings.Join(words, ", "))
	return v
}

// progressRows is how many rows the progress table shows (evenly spaced, the last one included).
const progressRows = 10

func runOf(outs []Outcome, total int) *progressView {
	v := &progressView{Done: GroupDigits(int64(len(outs))), Total: GroupDigits(int64(total))}
	plotW, plotH := chartW-padL-8, chartH-padB-8
	x := func(i int) float64 { return padL + plotW*float64(i)/float64(total) }
	y := func(f float64) float64 { return chartH - padB - plotH*min(max(f, 0), 1) }
	var mean, pass strings.Builder
	sum, scored, passed := 0.0, 0, 0
	step := max(len(outs)/progressRows, 1)
	for i, o := range outs {
		if o.Score != nil {
			sum += *o.Score
			scored++
		}
		if o.Status == "passed" {
			passed++
		}
		rate := float64(passed) / float64(i+1)
		cmd := "L"
		if i == 0 {
			cmd = "M"
		}
		fmt.Fprintf(&pass, "%s%.1f %.1f ", cmd, x(i+1), y(rate))
		if scored > 0 {
			c := "L"
			if mean.Len() == 0 {
				c = "M"
			}
			fmt.Fprintf(&mean, "%s%.1f %.1f ", c, x(i+1), y(sum/float64(scored)))
		}
		if (i+1)%step == 0 || i == len(outs)-1 {
			m := "–"
			if scored > 0 {
				m = num(sum / float64(scored))
			}
			if len(v.Rows) < progressRows || i == len(outs)-1 {
				v.Rows = append(v.Rows, progressRow{Done: strconv.Itoa(i + 1), Mean: m, PassRate: num(100*rate) + "%"})
			}
		}
	}
	v.MeanPath, v.PassPath = strings.TrimSpace(mean.String()), strings.TrimSpace(pass.String())
	v.XLabels = []labelView{{X: padL, Y: chartH - 8, Text: "0", Anchor: "start"},
		{X: padL + plotW, Y: chartH - 8, Text: GroupDigits(int64(total)), Anchor: "end"}}
	last := v.Rows[len(v.Rows)-1]
	v.Desc = fmt.Sprintf("%d of %d episodes finished. After the last one the mean score is %s and %s passed.", len(outs), total, last.Mean, last.PassRate)
	return v
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// partsView is an export's parts: a table and their rows as bars.
type partsView struct {
	Rows   []partRow
	Bars   []barView
	Height float64
	Desc   string
}

type partRow struct {
	Part, Rows, Bytes, SHA256 string
}

func partsOf(ps []Part) *partsView {
	if len(ps) == 0 {
		return nil
	}
	v := &partsView{Height: float64(len(ps))*22 + 4}
	most, total := 1, 0
	for _, p := range ps {
		most, total = max(most, p.Rows), total+p.Rows
	}
	for i, p := range ps {
		v.Rows = append(v.Rows, partRow{Part: strconv.Itoa(p.Part), Rows: GroupDigits(int64(p.Rows)), Bytes: GroupDigits(p.Bytes), SHA256: p.SHA256})
		w := (chartW - 72) * float64(p.Rows) / float64(most)
		v.Bars = append(v.Bars, barView{X: 72, Y: float64(i)*22 + 2, W: w, H: 18, Fill: fillBar,
			Title: fmt.Sprintf("part %d: %s rows", p.Part, GroupDigits(int64(p.Rows)))})
	}
	v.Desc = fmt.Sprintf("%d parts with %s rows in all; the largest holds %s.", len(ps), GroupDigits(int64(total)), GroupDigits(int64(most)))
	return v
}

// Package scorehist bins an eval's episode scores into a histogram, the one distribution every
// surface draws: the job page's SVG (frontend/pages) and `jobgate jobs get`'s sparkline
// (cmd/jobgate). It imports nothing of jobgate, so both may use it.
package scorehist

import (
	"math"
	"strings"
)

// Bins is the histogram's number of bars.
const Bins = 10

// Hist is a histogram of scores: Counts[i] scores fell in [Lo + i·w, Lo + (i+1)·w), the last bar
// closed at Hi (w = (Hi-Lo)/len(Counts)).
type Hist struct {
	Lo, Hi float64
	Counts []int
	N      int     // scores binned
	Mean   float64 // of the scores binned
}

// Of bins scores into n bars (Bins when n <= 0). The range is [0, 1] when every score lies in it
// (the usual case: a suite's pass threshold is on that scale), else the scores' own range.
// NaN and infinite scores are left out; with no score left the histogram is empty (N == 0).
func Of(scores []float64, n int) Hist {
	if n <= 0 {
		n = Bins
	}
	h := Hist{Lo: 0, Hi: 1, Counts: make([]int, n)}
	lo, hi, sum := math.Inf(1), math.Inf(-1), 0.0
	for _, s := range scores {
		if math.IsNaN(s) || math.IsInf(s, 0) {
			continue
		}
		lo, hi, sum = min(lo, s), max(hi, s), sum+s
		h.N++
	}
	if h.N == 0 {
		return h
	}
	h.Mean = sum / float64(h.N)
	if lo < 0 || hi > 1 {
		h.Lo, h.Hi = lo, hi
		if hi == lo {
			h.Lo, h.Hi = lo-0.5, hi+0.5
		}
	}
	w := (h.Hi - h.Lo) / float64(n)
	for _, s := range scores {
		if math.IsNaN(s) || math.IsInf(s, 0) {
			continue
		}
		i := int((s - h.Lo) / w)
		h.Counts[min(max(i, 0), n-1)]++
	}
	return h
}

// Max is the tallest bar's count.
func (h Hist) Max() int {
	m := 0
	for _, c := range h.Counts {
		m = max(m, c)
	}
	return m
}

// Edge is the lower edge of bar i (Edge(len(Counts)) is Hi).
func (h Hist) Edge(i int) float64 {
	return h.Lo + (h.Hi-h.Lo)*float64(i)/float64(len(h.Counts))
}

// blocks are the sparkline's eight heights; an empty bar is a space.
var blocks = []rune("▁▂▃▄▅▆▇█")

// Sparkline draws the histogram as one line, one character a bar: an empty bar blank, any other
// at least the lowest block, the tallest the full block.
func (h Hist) Sparkline() string {
	m := h.Max()
	var b strings.Builder
	for _, c := range h.Counts {
		if c == 0 || m == 0 {
			b.WriteRune(' ')
			continue
		}
		i := (c*len(blocks) - 1) / m
		b.WriteRune(blocks[min(i, len(blocks)-1)])
	}
	return b.String()
}

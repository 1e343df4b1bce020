package scorehist

import (
	"math"
	"testing"
)

func TestOf(t *testing.T) {
	h := Of([]float64{0, 0.05, 0.15, 0.95, 1, 1, math.NaN()}, 10)
	want := []int{2, 1, 0, 0, 0, 0, 0, 0, 0, 3}
	if h.Lo != 0 || h.Hi != 1 || h.N != 6 {
		t.Fatalf("range %v..%v n %d, want 0..1 n 6", h.Lo, h.Hi, h.N)
	}
	for i := range want {
		if h.Counts[i] != want[i] {
			t.Fatalf("counts %v, want %v", h.Counts, want)
		}
	}
	if got := h.Sparkline(); got != "▆▃       █" {
		t.Errorf("sparkline %q", got)
	}
	if math.Abs(h.Mean-3.15/6) > 1e-12 {
		t.Errorf("mean %v", h.Mean)
	}
	// Scores outside [0, 1]: their own range; one value: a unit-wide range around it.
	if h := Of([]float64{-2, 2}, 4); h.Lo != -2 || h.Hi != 2 || h.Counts[0] != 1 || h.Counts[3] != 1 {
		t.Errorf("wide range: %+v", h)
	}
	if h := Of([]float64{5, 5}, 2); h.Lo != 4.5 || h.Hi != 5.5 || h.Counts[1] != 2 {
		t.Errorf("one value: %+v", h)
	}
	if h := Of(nil, 0); h.N != 0 || len(h.Counts) != Bins || h.Sparkline() != "          " {
		t.Errorf("empty: %+v %q", h, h.Sparkline())
	}
}

func FuzzOf(f *testing.F) {
	f.Add(0.5, -1.0, 3.0, 7)
	f.Add(math.Inf(1), 0.0, 1e308, 1)
	f.Fuzz(func(t *testing.T, a, b, c float64, n int) {
		n = n%50 + 1
		if n <= 0 {
			n += 50
		}
		h := Of([]float64{a, b, c}, n)
		sum := 0
		for _, k := range h.Counts {
			sum += k
		}
		if sum != h.N || len(h.Counts) != n || len([]rune(h.Sparkline())) != n {
			t.Fatalf("%v %v %v n=%d: %+v", a, b, c, n, h)
		}
	})
}

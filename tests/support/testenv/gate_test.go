package testenv

import (
	"flag"
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB that records what the gate asked of it instead of ending the test.
type recorder struct {
	testing.TB
	calls []string
}

func (r *recorder) Helper() {}
func (r *recorder) Skip(args ...any) {
	r.calls = append(r.calls, "skip")
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.calls = append(r.calls, "fatal")
}
func (r *recorder) Errorf(format string, args ...any) {
	r.calls = append(r.calls, "error: "+fmt.Sprintf(format, args...))
}

func setShort(t *testing.T, v string) {
	old := flag.Lookup("test.short").Value.String()
	if err := flag.Set("test.short", v); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = flag.Set("test.short", old) })
}

func TestGate(t *testing.T) {
	for _, c := range []struct {
		short, ci string
		gate      func(testing.TB)
		want      string
	}{
		{"false", "", func(tb testing.TB) { Heavy(tb, "x") }, ""},
		{"false", "true", func(tb testing.TB) { Heavy(tb, "x") }, ""},
		{"true", "", func(tb testing.TB) { Heavy(tb, "x") }, "skip"},
		{"true", "true", func(tb testing.TB) { Heavy(tb, "x") }, "fatal"},
		{"true", "false", func(tb testing.TB) { Heavy(tb, "x") }, "skip"},
		{"false", "", func(tb testing.TB) { Missing(tb, "x") }, "skip"},
		{"false", "true", func(tb testing.TB) { Missing(tb, "x") }, "fatal"},
	} {
		setShort(t, c.short)
		t.Setenv("CI", c.ci)
		r := &recorder{TB: t}
		c.gate(r)
		// Fatalf ends a real test; what the recorder saw after it does not matter.
		if got := strings.Join(r.calls, ","); !strings.HasPrefix(got, c.want) || (c.want == "" && got != "") {
			t.Errorf("short=%s CI=%q: got %q, want %q first", c.short, c.ci, got, c.want)
		}
	}
}

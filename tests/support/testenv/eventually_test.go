package testenv

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// fatalRecorder records Fatalf and ends its goroutine, as a real test's FailNow does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = format
	runtime.Goexit()
}

// eventuallyIn runs Eventually on its own goroutine and returns what it failed with ("" if not).
func eventuallyIn(t *testing.T, within time.Duration, cond func() bool) string {
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Eventually(r, within, "the condition", cond)
	}()
	<-done
	return r.msg
}

func TestEventually(t *testing.T) {
	n := 0
	if msg := eventuallyIn(t, time.Minute, func() bool { n++; return n == 3 }); msg != "" || n != 3 {
		t.Fatalf("met on the third poll: failed %q after %d polls", msg, n)
	}
	start := time.Now()
	if msg := eventuallyIn(t, 100*time.Millisecond, func() bool { return false }); !strings.Contains(msg, "timed out") {
		t.Fatalf("never met: failed %q", msg)
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 10*time.Second {
		t.Fatalf("never met: gave up after %s, want about 100ms", d)
	}
}

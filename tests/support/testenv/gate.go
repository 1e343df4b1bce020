package testenv

import (
	"fmt"
	"os"
	"testing"
)

// CI reports whether the tests run on CI (CI=true), where nothing may be skipped.
func CI() bool { return os.Getenv("CI") == "true" }

// Heavy marks t as a test the fast loop leaves out: it spawns processes (the embedded Temporal
// server, jobgate binaries, PostgreSQL, Node.js) or times something for long. With -short it is
// skipped, except under CI=true, where -short is a mistake that would hide it: there it fails.
// what says what makes the test heavy.
func Heavy(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		skip(t, fmt.Sprintf("%s: left out by -short", what))
	}
}

// Missing reports that something t needs is not installed (why says what and how to get it):
// a skip on a developer's machine, a failure under CI=true.
func Missing(t testing.TB, why string) {
	t.Helper()
	skip(t, why)
}

func skip(t testing.TB, msg string) {
	t.Helper()
	if CI() {
		t.Fatalf("%s; CI=true: this test must run on CI, not be skipped", msg)
	}
	t.Skip(msg)
}

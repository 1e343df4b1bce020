package activities

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/jobgate/jobgate/activities/contract"
)

func TestParseScore(t *testing.T) {
	for _, c := range []struct {
		out  string
		want float64
		ok   bool
	}{
		{`{"score": 0.5}`, 0.5, true},
		{"noise\nmore noise\n{\"score\": 1}\n", 1, true},
		{`{"score": -3}`, -3, true},
		{`{"score": 1e200}`, 0, false}, // would overflow the running sums
		{`{"score": "0.5"}`, 0, false},
		{`{"points": 1}`, 0, false},
		{``, 0, false},
		{`{"score": 0.5} trailing`, 0, false},
	} {
		got, err := parseScore(c.out)
		if (err == nil) != c.ok || (c.ok && got.Score != c.want) {
			t.Errorf("%q: got %v, %v", c.out, got, err)
		}
	}
}

// TestCommandEnvAllowList: a command sees the base variables, its suite's named ones and its
// episode's JOBGATE_* variables, and nothing else of the worker's environment.
func TestCommandEnvAllowList(t *testing.T) {
	t.Setenv("JOBGATE_HS256_SECRET_FILE", "/run/secrets/hs256")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
	t.Setenv("PGPASSWORD", "pg-secret")
	t.Setenv("SOME_TOOL_HOME", "/opt/tool")
	t.Setenv("OPENAI_API_KEY", "named")
	t.Setenv("PATH", "/usr/bin:/bin")
	t.Setenv("HOME", "/home/worker")
	t.Setenv("LANG", "C.UTF-8")
	t.Setenv("TZ", "") // restored after the test…
	os.Unsetenv("TZ")  // …and unset during it: a base variable the worker lacks stays unset
	s := contract.Suite{Kind: contract.SuiteCommand, Env: []string{"OPENAI_API_KEY", "NOT_SET_ANYWHERE", "PATH"}}
	got := commandEnv(s, "JOBGATE_JOB_ID=acme/eval/k")
	want := []string{"PATH=/usr/bin:/bin", "HOME=/home/worker", "LANG=C.UTF-8", "OPENAI_API_KEY=named", "JOBGATE_JOB_ID=acme/eval/k"}
	if lc, ok := os.LookupEnv("LC_ALL"); ok {
		want = slices.Insert(want, 3, "LC_ALL="+lc)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("env:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

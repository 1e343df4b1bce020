package activities

import (
	"strings"
	"testing"
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

func TestWorkerEnvDropsJobgateSettings(t *testing.T) {
	t.Setenv("JOBGATE_HS256_SECRET_FILE", "/run/secrets/hs256")
	t.Setenv("SOME_TOOL_HOME", "/opt/tool")
	env := strings.Join(workerEnv(), "\n")
	if strings.Contains(env, "JOBGATE_") || !strings.Contains(env, "SOME_TOOL_HOME=/opt/tool") {
		t.Fatalf("env: %s", env)
	}
}

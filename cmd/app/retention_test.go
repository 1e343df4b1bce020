package app

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/activities/contract"
)

// TestRetentionCheck: a dataset keeping artifacts longer than the namespace keeps closed jobs
// is named (serve and worker log it), and setup refuses it unless forced.
func TestRetentionCheck(t *testing.T) {
	day := 24 * time.Hour
	ds := contract.Datasets{
		"customers": {Name: "customers", Retention: contract.Duration(30 * day)},
		"orders":    {Name: "orders"}, // the default, 7 days
		"logs":      {Name: "logs", Retention: contract.Duration(day)},
	}
	if p := RetentionProblems("jobs", 30*day, ds); len(p) != 0 {
		t.Fatalf("30-day namespace: %q", p)
	}
	if p := RetentionProblems("jobs", 0, ds); len(p) != 0 {
		t.Fatalf("unknown retention: %q", p)
	}
	p := RetentionProblems("jobs", 7*day, ds)
	if len(p) != 1 || !strings.Contains(p[0], `dataset "customers"`) || !strings.Contains(p[0], `namespace "jobs"`) {
		t.Fatalf("7-day namespace: %q", p)
	}
	if p := RetentionProblems("jobs", 3*day, ds); len(p) != 2 || !strings.Contains(p[1], `"orders"`) {
		t.Fatalf("3-day namespace (the default dataset retention counts): %q", p)
	}

	c := SetupConfig{Namespace: "jobs"}
	var out bytes.Buffer
	if err := checkRetention(c, 7*day, ds, &out); err == nil || !strings.Contains(err.Error(), "customers") ||
		!strings.Contains(err.Error(), "--force") {
		t.Fatalf("setup without --force: %v", err)
	}
	c.Force = true
	if err := checkRetention(c, 7*day, ds, &out); err != nil || !strings.Contains(out.String(), "warning (--force)") {
		t.Fatalf("setup with --force: %v, %q", err, out.String())
	}
	out.Reset()
	if err := checkRetention(SetupConfig{Namespace: "jobs"}, 30*day, ds, &out); err != nil || out.Len() != 0 {
		t.Fatalf("long enough: %v, %q", err, out.String())
	}

	// The flags exist (JOBGATE_FORCE and JOBGATE_DATASETS come with BindEnv).
	var sc SetupConfig
	fs := flag.NewFlagSet("setup", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	sc.Flags(fs)
	if err := fs.Parse([]string{"--force", "--datasets", "/etc/jobgate/datasets.json"}); err != nil || !sc.Force ||
		sc.DatasetsFile != "/etc/jobgate/datasets.json" {
		t.Fatalf("flags: %v %+v", err, sc)
	}
}

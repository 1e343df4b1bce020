package tests

import (
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/activities/payloadcrypt"
	"github.com/jobgate/jobgate/tests/support/pgtest"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// TestExportFailureMessageIsSafe: an export whose dataset's database refuses the worker (a
// real PostgreSQL server, a made-up role and database) fails with a stable code and a message
// that names no host, port, user, database or worker (pid@host); the driver's error stays in
// the job's history for the operator.
func TestExportFailureMessageIsSafe(t *testing.T) {
	testenv.Heavy(t, "starts PostgreSQL")
	t.Parallel()
	pg := pgtest.Start(t)
	u, err := url.Parse(pg.DSN)
	must(t, err)
	const role, dbName = "mallory_svc", "crm_prod_eu"
	u.User = url.UserPassword(role, "hunter2")
	u.Path = "/" + dbName
	d := demoDataset("", func(d *contract.Dataset) { d.Driver, d.DSN = contract.DriverPostgres, u.String() })
	b := setup(t, setupOpts{datasetsJSON: catalogJSON(t, d)})
	cs := b.session(ana, 0, "")
	v := mustView(t, exStart(t, cs, uniqueKey(t), "csv", []string{"id", "name"}))
	// Before the fix the refusal was retried ten times (about 150 s) and then shown verbatim.
	got := exWait(t, cs, v.Handle, workflows.StatusFailed, 200*time.Second)
	if got.Error == nil || got.Error.Code != workflows.ErrCodeExportFailed {
		t.Fatalf("error %+v", got.Error)
	}
	host, _ := os.Hostname()
	for _, leak := range []string{u.Hostname(), u.Port(), role, dbName, "hunter2", "@", strconv.Itoa(os.Getpid()), host, "pgx", "SQLSTATE"} {
		if leak == "" || (leak == host && strings.Contains(workflows.MsgExportFailed, host)) {
			continue // a host named like a word of the fixed text ("worker") is no leak
		}
		for what, s := range map[string]string{"error.message": got.Error.Message, "progress.message": got.Progress.Message} {
			if strings.Contains(s, leak) {
				t.Errorf("%s %q shows %q", what, s, leak)
			}
		}
	}
	// The detail is not lost: the activity's failure in history names the refused role.
	found := false
	for _, ev := range acHistory(t, b, got.JobID) {
		f := ev.GetActivityTaskFailedEventAttributes().GetFailure()
		if f == nil {
			continue
		}
		// Sealed, as Temporal holds it: the message is readable only with the keys.
		if strings.Contains(f.String(), role) {
			t.Errorf("the activity failure names the role in clear: %v", f)
		}
		payloadcrypt.DecodeFailure(b.converter(), f)
		if strings.Contains(f.String(), role) {
			found = true
		}
	}
	if !found {
		t.Fatal("no activity failure in history names the refused role")
	}
}

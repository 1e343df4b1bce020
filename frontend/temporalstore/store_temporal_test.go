package temporalstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/workflows"
)

// The Temporal store maps Temporal's errors to the store's values, so the core never inspects
// a serviceerror (the core's mapping of those values: TestResume_ErrorMapping, TestListJobs_Fake).
func TestTemporalStoreErrors(t *testing.T) {
	// Resume: the workflow's refusal keeps its kind and message; out of time or unreachable is
	// errUpdateTimeout; a closed or unknown run is jobstore.ErrJobNotFound; anything else stays internal.
	appErr := fmt.Errorf("update: %w", temporal.NewApplicationError("scope_digest does not match", workflows.RejectInputNotExpected))
	var rej *jobstore.ResumeRejected
	if err := resumeStoreErr("j", appErr); !errors.As(err, &rej) || rej.Kind != workflows.RejectInputNotExpected || rej.Msg != "scope_digest does not match" {
		t.Errorf("application error: %v", err)
	}
	for _, err := range []error{context.DeadlineExceeded, serviceerror.NewUnavailable("down"), serviceerror.NewResourceExhausted(0, "busy"),
		serviceerror.NewDeadlineExceeded("slow"), status.Error(codes.Unavailable, "conn")} {
		if got := resumeStoreErr("j", err); !errors.Is(got, jobstore.ErrUpdateTimeout) {
			t.Errorf("%T %v: got %v, want errUpdateTimeout", err, err, got)
		}
	}
	if err := resumeStoreErr("j", serviceerror.NewNotFound("gone")); !errors.Is(err, jobstore.ErrJobNotFound) {
		t.Errorf("not found: %v", err)
	}
	if err := resumeStoreErr("j", errors.New("boom")); err == nil || errors.Is(err, jobstore.ErrUpdateTimeout) || errors.Is(err, jobstore.ErrJobNotFound) {
		t.Errorf("other: %v", err)
	}
	if resumeStoreErr("j", nil) != nil {
		t.Error("success is an error")
	}

	// List: an invalid argument with a page token is the token; without one, the query.
	ia := serviceerror.NewInvalidArgument("bad")
	if err := listStoreErr(ia, []byte("tok")); !errors.Is(err, jobstore.ErrPageToken) {
		t.Errorf("rejected token: %v", err)
	}
	if err := listStoreErr(ia, nil); errors.Is(err, jobstore.ErrPageToken) || errors.Is(err, jobstore.ErrStoreUnavailable) {
		t.Errorf("rejected query: %v", err)
	}
	// Unreachable or overloaded is the core's unavailable; other errors are not.
	if err := listStoreErr(serviceerror.NewUnavailable("down"), nil); !errors.Is(err, jobstore.ErrStoreUnavailable) {
		t.Errorf("unavailable: %v", err)
	}
	if err := storeErr("describe j", serviceerror.NewPermissionDenied("no", "")); errors.Is(err, jobstore.ErrStoreUnavailable) {
		t.Errorf("permission denied is not unavailable: %v", err)
	}
}

// A run state's value is the error code a view shows for a job whose workflow ended without
// reporting a reason; it is spelt as before the store existed: Temporal's status name in lower
// case ("timedout", not "timed_out").
func TestExecStatusOfSpellsTemporalStatus(t *testing.T) {
	for v := range enumspb.WorkflowExecutionStatus_name {
		st := enumspb.WorkflowExecutionStatus(v)
		if st == enumspb.WORKFLOW_EXECUTION_STATUS_PAUSED {
			continue // deprecated, never reported for a job
		}
		if got, want := string(execStatusOf(st)), strings.ToLower(st.String()); got != want {
			t.Errorf("%v: run state %q, want %q", st, got, want)
		}
	}
}

package devtemporal

import (
	"context"
	"fmt"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/log"

	"github.com/jobgate/jobgate/tests/support/testenv"
)

func TestFairnessDynamicConfig(t *testing.T) {
	dc := dynamicconfig.NewCollection(dynamicConfig([]string{"tq-fifo"}), log.NewNoopLogger())
	dc.Start()
	defer dc.Stop()
	enabled := dynamicconfig.MatchingEnableFairness.Get(dc)
	now := time.Now()
	for _, tc := range []struct {
		tq   string
		typ  enumspb.TaskQueueType
		want bool
	}{
		{"jobgate", enumspb.TASK_QUEUE_TYPE_ACTIVITY, true},
		{"jobgate", enumspb.TASK_QUEUE_TYPE_WORKFLOW, true},
		{"tq-fifo", enumspb.TASK_QUEUE_TYPE_ACTIVITY, false},
		{"tq-fifo", enumspb.TASK_QUEUE_TYPE_WORKFLOW, false},
		{"tq-fifo-2", enumspb.TASK_QUEUE_TYPE_ACTIVITY, true},
	} {
		gc := enabled("default", tc.tq, tc.typ)
		if got := gc.Value(nil, now); got != tc.want {
			t.Errorf("matching.enableFairness for %s/%v = %v, want %v", tc.tq, tc.typ, got, tc.want)
		}
	}
	dc0 := dynamicconfig.NewCollection(dynamicConfig(nil), log.NewNoopLogger())
	dc0.Start()
	defer dc0.Stop()
	gc := dynamicconfig.MatchingEnableFairness.Get(dc0)("default", "jobgate", enumspb.TASK_QUEUE_TYPE_ACTIVITY)
	if !gc.Value(nil, now) {
		t.Error("fairness is off without unfair task queues")
	}
}

func fairnessWorkflow(ctx workflow.Context, n int) (int, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute,
		Priority: temporal.Priority{FairnessKey: "acme", FairnessWeight: 2}})
	fs := make([]workflow.Future, n)
	for i := range fs {
		fs[i] = workflow.ExecuteActivity(ctx, "FairnessActivity", i)
	}
	sum := 0
	for _, f := range fs {
		var v int
		if err := f.Get(ctx, &v); err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// Switching fairness on or off for a task queue (or upgrading a data directory written
// before it was on) keeps its backlog: the server drains the old task tables.
func TestFairnessSwitchKeepsBacklog(t *testing.T) {
	testenv.Heavy(t, "starts three Temporal servers on one data directory and drains backlogs")
	dir := t.TempDir()
	const tq = "tq-switch"
	const episodes = 5
	opts := func(unfair bool) Options {
		o := Options{DataDir: dir, UIPort: UIDisabled}
		if unfair {
			o.UnfairTaskQueues = []string{tq}
		}
		return o
	}
	// leaveBacklog starts a workflow whose activities wait in tq: its worker runs workflows only.
	leaveBacklog := func(c client.Client, id string) {
		t.Helper()
		w := worker.New(c, tq, worker.Options{})
		w.RegisterWorkflow(fairnessWorkflow)
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: tq}, fairnessWorkflow, episodes); err != nil {
			t.Fatal(err)
		}
		for {
			d, err := c.DescribeWorkflowExecution(ctx, id, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(d.GetPendingActivities()) == episodes {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("%s scheduled %d of %d activities", id, len(d.GetPendingActivities()), episodes)
			}
			time.Sleep(50 * time.Millisecond) // poll interval, bounded by ctx
		}
	}
	// finish runs the activities of id and waits for its result.
	finish := func(c client.Client, id string) {
		t.Helper()
		w := worker.New(c, tq, worker.Options{})
		w.RegisterWorkflow(fairnessWorkflow)
		w.RegisterActivityWithOptions(func(ctx context.Context, i int) (int, error) {
			if p := activity.GetInfo(ctx).Priority; p.FairnessKey != "acme" || p.FairnessWeight != 2 {
				return 0, fmt.Errorf("activity priority %+v", p)
			}
			return i, nil
		}, activity.RegisterOptions{Name: "FairnessActivity"})
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		// The bound is generous: what this test asserts is that the backlog is kept across the
		// switch, not how soon the server drains the other task tables. On a loaded 2-core
		// machine (CI runs it beside the integration suite) that drain took over 30 s once.
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		var sum int
		if err := c.GetWorkflow(ctx, id, "").Get(ctx, &sum); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if sum != episodes*(episodes-1)/2 {
			t.Fatalf("%s: sum %d", id, sum)
		}
	}

	// Fairness off (a server or data directory from before): a backlog in the classic tables.
	s := startServer(t, opts(true))
	leaveBacklog(dial(t, s), "wf-before")
	must(t, s.Stop())
	// Fairness on: the old backlog is dispatched; a new one goes to the fair tables.
	s = startServer(t, opts(false))
	c := dial(t, s)
	finish(c, "wf-before")
	leaveBacklog(c, "wf-fair")
	must(t, s.Stop())
	// And back off again.
	s = startServer(t, opts(true))
	finish(dial(t, s), "wf-fair")
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

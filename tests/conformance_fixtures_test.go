package tests

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// conformanceFixtureEnds is how each fixture tool's jobs must have ended once the Tasks
// scenarios ran: every job a scenario started ends (the scenarios cancel what they leave
// running), and each tool ends the way the suite's checks require.
var conformanceFixtureEnds = map[string][]enumspb.WorkflowExecutionStatus{
	workflows.FixtureGreet:         {enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED},
	workflows.FixtureSlowCompute:   {enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED},
	workflows.FixtureFailingJob:    {enumspb.WORKFLOW_EXECUTION_STATUS_FAILED},
	workflows.FixtureProtocolError: {enumspb.WORKFLOW_EXECUTION_STATUS_FAILED},
	workflows.FixtureConfirmDelete: {enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED},
	workflows.FixtureMultiInput:    {enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED},
	workflows.FixtureToolWithTask:  {enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED},
}

// conformanceCheckFixtureJobs checks, against Temporal's own records, that the fixtures the
// Tasks scenarios called were real jobs: workflows of the fixture kind under the proxy's
// principal (acme/ana), one tool per job as its start input says, every one of them ended as
// its tool must, and every fixture tool was called. dc holds the stack's payload keys.
func conformanceCheckFixtureJobs(t *testing.T, temporalAddr string, dc converter.DataConverter) {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: temporalAddr, Namespace: namespace})
	must(t, err)
	defer c.Close()
	q := fmt.Sprintf("WorkflowType = '%s'", workflows.FixtureWorkflowName)
	list := func() []string {
		var out []string
		var token []byte
		for {
			resp, err := c.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Namespace: namespace,
				Query: q, NextPageToken: token})
			must(t, err)
			for _, e := range resp.GetExecutions() {
				out = append(out, e.GetExecution().GetWorkflowId()+" "+e.GetStatus().String())
			}
			if token = resp.GetNextPageToken(); len(token) == 0 {
				return out
			}
		}
	}
	// Visibility trails the runs: wait until it lists none still running.
	var rows []string
	testenv.Eventually(t, time.Minute, "every fixture job to end", func() bool {
		rows = list()
		return len(rows) > 0 && !slices.ContainsFunc(rows, func(r string) bool { return strings.HasSuffix(r, " Running") })
	})
	byTool := map[string]int{}
	for _, row := range rows {
		id, _, _ := strings.Cut(row, " ")
		if !strings.HasPrefix(id, "acme/"+workflows.KindFixture+"/ana/") {
			t.Errorf("fixture job %s: not under the proxy's principal acme/ana", id)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		it := c.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		ev, err := it.Next()
		must(t, err)
		var in workflows.FixtureInput
		must(t, dc.FromPayloads(ev.GetWorkflowExecutionStartedEventAttributes().GetInput(), &in))
		desc, err := c.DescribeWorkflowExecution(ctx, id, "")
		cancel()
		must(t, err)
		status := desc.GetWorkflowExecutionInfo().GetStatus()
		want, known := conformanceFixtureEnds[in.Tool]
		switch {
		case !known:
			t.Errorf("fixture job %s: unknown tool %q", id, in.Tool)
		case !slices.Contains(want, status):
			t.Errorf("fixture job %s (%s) ended %s, want one of %v", id, in.Tool, status, want)
		}
		byTool[in.Tool]++
	}
	for tool := range conformanceFixtureEnds {
		if byTool[tool] == 0 {
			t.Errorf("no job of the fixture %s: the Tasks scenarios did not reach it", tool)
		}
	}
	t.Logf("fixture jobs in Temporal, by tool: %v", byTool)
}

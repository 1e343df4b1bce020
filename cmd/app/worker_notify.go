package app

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/workflows"
)

// notifications is the worker's view of the tenants file's notify endpoints: the targets with
// their secrets read, by tenant. It answers workflows.Notifications and feeds the Notifier.
type notifications struct {
	targets map[string][]activities.NotifyTarget
}

// loadNotifications reads every endpoint's secret file (relative names are relative to the
// tenants file's directory). A missing or unreadable secret is an error at start, naming the
// endpoint's field, never a failed delivery later.
func loadNotifications(t authz.Tenants, tenantsFile string) (*notifications, error) {
	n := &notifications{targets: map[string][]activities.NotifyTarget{}}
	for tenant, list := range t.Notify {
		for i, e := range list {
			p := e.SecretFile
			if !filepath.IsAbs(p) && tenantsFile != "" {
				p = filepath.Join(filepath.Dir(tenantsFile), p)
			}
			raw, err := os.ReadFile(p)
			if err == nil {
				var secret []byte
				if secret, err = activities.ReadNotifySecret(raw); err == nil {
					n.targets[tenant] = append(n.targets[tenant], activities.NotifyTarget{NotifyEndpoint: e, Secret: secret})
					continue
				}
			}
			return nil, fmt.Errorf("tenants file: notify.%s[%d].secret_file: %v", tenant, i, err)
		}
	}
	return n, nil
}

// checkPublicURL refuses to start a worker that has endpoints but no absolute http(s)
// --public-url: its events would carry relative links (useless outside the browser, refused by
// Slack, so the event would be lost). The error names the flag, not the value (user info).
func (n *notifications) checkPublicURL(public string) error {
	if n == nil || len(n.targets) == 0 {
		return nil
	}
	u, err := url.Parse(public)
	switch {
	case public == "":
		return errors.New("--public-url: required when the tenants file names notification endpoints (their links are <public-url>/approvals/<job-id>), e.g. https://jobgate.example.com")
	case err != nil, u.Scheme != "http" && u.Scheme != "https", u.Host == "", u.User != nil:
		return errors.New("--public-url: not an absolute http(s) URL without user info; notification links need one, e.g. https://jobgate.example.com")
	}
	return nil
}

// Wants implements workflows.Notifications.
func (n *notifications) Wants(tenant, event string) bool { return len(n.Targets(tenant, event)) > 0 }

// Targets are tenant's endpoints that want event.
func (n *notifications) Targets(tenant, event string) []activities.NotifyTarget {
	if n == nil {
		return nil
	}
	var out []activities.NotifyTarget
	for _, t := range n.targets[tenant] {
		if t.Wants(event) {
			out = append(out, t)
		}
	}
	return out
}

// notifyDeliveries is jobgate_notify_deliveries_total{endpoint, outcome}: it counts attempts, one
// per activity attempt per endpoint, by outcome (contract.Outcome*); an event delivered on the
// third try counts retry 2, delivered 1. The name stays (documented in activities/README.md).
func notifyDeliveries(reg prometheus.Registerer) func(endpoint, outcome string) {
	if reg == nil {
		return nil
	}
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jobgate_notify_deliveries_total",
		Help: "Notification delivery attempts (one per activity attempt per endpoint; job.progress: per attempt within its window) by endpoint and outcome (delivered, retry, rejected, refused; dropped: a job.progress event that did not land within its window); delivered counts events delivered."},
		[]string{"endpoint", "outcome"})
	reg.MustRegister(c)
	return func(endpoint, outcome string) { c.WithLabelValues(endpoint, outcome).Inc() }
}

// jobSnapshot reads a job for job.progress the way get_* does while no worker runs: one
// Describe of its current run (JobStatus search attribute, progress memo). A job ID that now
// names another job instance (another first run), or no job at all, reads as closed.
func jobSnapshot(c client.Client, dc converter.DataConverter) func(ctx context.Context, jobID, firstRunID string) (activities.JobSnapshot, error) {
	return func(ctx context.Context, jobID, firstRunID string) (activities.JobSnapshot, error) {
		resp, err := c.DescribeWorkflowExecution(ctx, jobID, "")
		if err != nil {
			var nf *serviceerror.NotFound
			if errors.As(err, &nf) {
				return activities.JobSnapshot{Closed: true}, nil
			}
			return activities.JobSnapshot{}, err
		}
		info := resp.GetWorkflowExecutionInfo()
		first := info.GetFirstRunId()
		if first == "" {
			first = info.GetExecution().GetRunId()
		}
		var s activities.JobSnapshot
		s.Closed = info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING || first != firstRunID
		if p := info.GetSearchAttributes().GetIndexedFields()[workflows.SAJobStatus.GetName()]; p != nil {
			_ = dc.FromPayload(p, &s.Status)
		}
		if p := info.GetMemo().GetFields()[workflows.MemoProgress]; p != nil {
			var prog workflows.Progress
			if err := dc.FromPayload(p, &prog); err == nil {
				s.Progress = contract.EventProgress{Done: prog.Done, Failed: prog.Failed, Total: prog.Total,
					Unit: prog.Unit, Message: prog.Message, AsOf: prog.AsOf}
			}
		}
		return s, nil
	}
}

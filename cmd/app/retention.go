package app

import (
	"context"
	"fmt"
	"time"

	"github.com/jobgate/jobgate/activities/contract"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
)

// RetentionProblems lists, one sentence each, the datasets whose artifact retention outlasts
// the namespace's retention nsRetention (0: unknown or unlimited, never a problem). Such an
// export's job is purged from Temporal while its artifact is still stored: get_export no longer
// finds it, and its idempotency key starts a new job (which gets an artifact of its own, never
// the old one: artifacts are scoped by the job's first run).
func RetentionProblems(namespace string, nsRetention time.Duration, ds contract.Datasets) []string {
	if nsRetention <= 0 {
		return nil
	}
	var out []string
	for _, name := range ds.Names() {
		r := ds[name].Retention.D()
		if r <= 0 {
			r = contract.RetentionDefault
		}
		if r > nsRetention {
			out = append(out, fmt.Sprintf("dataset %q keeps artifacts for %s, longer than the retention of namespace %q (%s): "+
				"finished exports are purged from Temporal while their artifacts remain; raise the namespace retention "+
				"or lower the dataset's retention", name, r, namespace, nsRetention))
		}
	}
	return out
}

// namespaceRetention is the namespace's workflow execution retention.
func namespaceRetention(ctx context.Context, tc client.Client, namespace string) (time.Duration, error) {
	resp, err := tc.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
	if err != nil {
		return 0, fmt.Errorf("describe namespace %q: %w", namespace, err)
	}
	return resp.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration(), nil
}

// warnRetention logs a warning per RetentionProblems (the worker starts anyway: the
// namespace is the operator's, and setup is where a mismatch is refused). It retries while
// Temporal is unreachable, until ctx ends or a few attempts failed.
func warnRetention(ctx context.Context, tc client.Client, namespace string, ds contract.Datasets, log *zap.Logger) {
	if len(ds) == 0 {
		return
	}
	if namespace == "" {
		namespace = "default" // the SDK's default, as in TemporalConfig
	}
	var err error
	for attempt := 0; attempt < 6; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Second):
			}
		}
		var ret time.Duration
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ret, err = namespaceRetention(actx, tc, namespace)
		cancel()
		if err == nil {
			for _, p := range RetentionProblems(namespace, ret, ds) {
				log.Warn("namespace retention shorter than a dataset's artifact retention", zap.String("problem", p))
			}
			return
		}
	}
	log.Warn("could not check the namespace retention against the datasets' retention", zap.Error(err))
}

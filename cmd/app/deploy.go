package app

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
)

// DeployConfig configures `jobgate deploy`: the operator's view and control of the Worker
// Deployment the workers join (worker_deploy.go).
type DeployConfig struct {
	// Address, Namespace and TLS: the same flags and variables as serve, worker and setup.
	Address, Namespace string
	TLS                TemporalTLS
	// Name of the Worker Deployment. Defaults to DeploymentNameDefault.
	Name string
	// Timeout bounds the command, including waiting for Temporal.
	Timeout time.Duration
}

// Flags registers deploy's flags.
func (c *DeployConfig) Flags(fs *flag.FlagSet) {
	ConnectionFlags(fs, &c.Address, &c.Namespace, &c.TLS)
	fs.StringVar(&c.Name, "deployment-name", DeploymentNameDefault, "Temporal Worker Deployment the workers join")
	fs.DurationVar(&c.Timeout, "timeout", 30*time.Second, "give up after this long (includes waiting for Temporal)")
}

const deployUsage = `Usage:
  jobgate deploy status                      versions of the deployment: current, ramping, drainage, open jobs on each
  jobgate deploy set-current <build-id>      new jobs (and auto-upgrading workflows) run on this build from now on
  jobgate deploy ramp <build-id> <percent>   send percent (0-100) of new jobs to this build; 0 pauses the ramp
  jobgate deploy build-id                    print the build ID this binary's worker would use by default

A pinned job (evals, exports) finishes on the build it started on: keep an old build's workers
running until 'status' shows its version drained (no open pinned jobs). See cmd/app/README.md.
`

// RunDeploy is the `jobgate deploy` command.
func RunDeploy(args []string, stdout, stderr io.Writer) error {
	var c DeployConfig
	fs := CommandFlags("deploy", deployUsage, stderr)
	c.Flags(fs)
	if err := BindEnv(fs); err != nil {
		return err
	}
	if len(args) == 0 {
		fs.Usage()
		return flag.ErrHelp
	}
	sub, rest := args[0], args[1:]
	// Flags may come before or after the positional arguments.
	var pos []string
	for {
		if err := fs.Parse(rest); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		pos, rest = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	want := map[string]int{"status": 0, "set-current": 1, "ramp": 2, "build-id": 0}
	n, ok := want[sub]
	if !ok {
		fs.Usage()
		return fmt.Errorf("deploy: unknown subcommand %q (status, set-current, ramp, build-id)", sub)
	}
	if len(pos) != n {
		return fmt.Errorf("deploy %s: want %d argument(s), got %q", sub, n, pos)
	}
	if sub == "build-id" {
		fmt.Fprintln(stdout, DefaultBuildID())
		return nil
	}
	var pct float64
	if sub == "ramp" {
		var err error
		pct, err = strconv.ParseFloat(pos[1], 32)
		if err != nil || pct < 0 || pct > 100 {
			return fmt.Errorf("deploy ramp: percent %q: want a number from 0 to 100", pos[1])
		}
	}
	if n > 0 {
		if err := checkDeploymentNames(c.Name, pos[0]); err != nil {
			return err
		}
	}
	log, err := NewLogger("console", zap.WarnLevel)
	if err != nil {
		return err
	}
	defer log.Sync()
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	tc, _, err := DialTemporal(ctx, c.Address, c.Namespace, c.TLS, log)
	if err != nil {
		return err
	}
	defer tc.Close()
	h := tc.WorkerDeploymentClient().GetHandle(c.Name)
	switch sub {
	case "set-current":
		if _, err := h.SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: pos[0]}); err != nil {
			return deployError(c, pos[0], err)
		}
		fmt.Fprintf(stdout, "deployment %s: %s is current; new jobs run on it\n", c.Name, pos[0])
	case "ramp":
		if _, err := h.SetRampingVersion(ctx, client.WorkerDeploymentSetRampingVersionOptions{BuildID: pos[0],
			Percentage: float32(pct)}); err != nil {
			return deployError(c, pos[0], err)
		}
		fmt.Fprintf(stdout, "deployment %s: %s ramping at %g%% of new jobs\n", c.Name, pos[0], pct)
	case "status":
		st, err := DeployStatus(ctx, tc, c.Namespace, c.Name)
		if err != nil {
			return deployError(c, "", err)
		}
		st.Print(stdout)
	}
	return nil
}

func deployError(c DeployConfig, buildID string, err error) error {
	if isNotFound(err) {
		if buildID != "" {
			return fmt.Errorf("deployment %s has no version %s in namespace %s: start its workers first (jobgate worker --build-id %s): %w",
				c.Name, buildID, c.Namespace, buildID, err)
		}
		return fmt.Errorf("no deployment %s in namespace %s: it appears when a worker with --deployment-name %s polls: %w",
			c.Name, c.Namespace, c.Name, err)
	}
	return fmt.Errorf("deployment %s: %w", c.Name, err)
}

// VersionStatus is one version of a deployment as `jobgate deploy status` shows it.
type VersionStatus struct {
	BuildID string
	// Role: "current", "ramping <n>%" or "" (neither).
	Role string
	// Drainage is the server's view: "draining" (open pinned workflows), "drained", or "" while
	// current or ramping. The server refreshes it every few minutes.
	Drainage string
	// Running and Pinned count open workflows whose last task ran on this version (all, and
	// pinned ones), read from visibility now.
	Running, Pinned int64
	TaskQueues      []string
	Created         time.Time
}

// DeploymentStatus is `jobgate deploy status`'s answer.
type DeploymentStatus struct {
	Name, Namespace string
	Versions        []VersionStatus
}

// DeployStatus describes deployment name: each version's role, the server's drainage status and
// the open (and open pinned) workflows counted by visibility on that version.
func DeployStatus(ctx context.Context, tc client.Client, namespace, name string) (DeploymentStatus, error) {
	h := tc.WorkerDeploymentClient().GetHandle(name)
	desc, err := h.Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	if err != nil {
		return DeploymentStatus{}, err
	}
	st := DeploymentStatus{Name: name, Namespace: namespace}
	rc := desc.Info.RoutingConfig
	for _, s := range desc.Info.VersionSummaries {
		v := VersionStatus{BuildID: s.Version.BuildID, Created: s.CreateTime}
		switch {
		case rc.CurrentVersion != nil && rc.CurrentVersion.BuildID == v.BuildID:
			v.Role = "current"
		case rc.RampingVersion != nil && rc.RampingVersion.BuildID == v.BuildID:
			v.Role = fmt.Sprintf("ramping %g%%", rc.RampingVersionPercentage)
		}
		switch s.DrainageStatus {
		case client.WorkerDeploymentVersionDrainageStatusDraining:
			v.Drainage = "draining"
		case client.WorkerDeploymentVersionDrainageStatusDrained:
			v.Drainage = "drained"
		}
		if vd, err := h.DescribeVersion(ctx, client.WorkerDeploymentDescribeVersionOptions{BuildID: v.BuildID}); err == nil {
			for _, q := range vd.Info.TaskQueuesInfos {
				if !slices.Contains(v.TaskQueues, q.Name) {
					v.TaskQueues = append(v.TaskQueues, q.Name)
				}
			}
		}
		// The system search attributes the server keeps for versioned workflows.
		q := fmt.Sprintf("TemporalWorkerDeploymentVersion = '%s:%s' AND ExecutionStatus = 'Running'", name, v.BuildID)
		if v.Running, err = count(ctx, tc, namespace, q); err != nil {
			return st, err
		}
		if v.Pinned, err = count(ctx, tc, namespace, q+" AND TemporalWorkflowVersioningBehavior = 'Pinned'"); err != nil {
			return st, err
		}
		st.Versions = append(st.Versions, v)
	}
	slices.SortFunc(st.Versions, func(a, b VersionStatus) int { return a.Created.Compare(b.Created) })
	return st, nil
}

func count(ctx context.Context, tc client.Client, ns, q string) (int64, error) {
	resp, err := tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: ns, Query: q})
	if err != nil {
		return 0, fmt.Errorf("count workflows (%s): %w", q, err)
	}
	return resp.GetCount(), nil
}

// Version finds a build's status.
func (s DeploymentStatus) Version(buildID string) (VersionStatus, bool) {
	for _, v := range s.Versions {
		if v.BuildID == buildID {
			return v, true
		}
	}
	return VersionStatus{}, false
}

// Print writes the status as a table, oldest version first, with what an operator may do.
func (s DeploymentStatus) Print(w io.Writer) {
	fmt.Fprintf(w, "deployment %s (namespace %s)\n", s.Name, s.Namespace)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BUILD ID\tROLE\tDRAINAGE\tOPEN\tOPEN PINNED\tTASK QUEUES\tCREATED\tWORKERS")
	for _, v := range s.Versions {
		role, drain := v.Role, v.Drainage
		if role == "" {
			role = "-"
		}
		if drain == "" {
			drain = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", v.BuildID, role, drain, v.Running, v.Pinned,
			strings.Join(v.TaskQueues, ","), v.Created.UTC().Format(time.RFC3339), v.advice())
	}
	_ = tw.Flush()
}

// advice says whether the version's workers may stop.
func (v VersionStatus) advice() string {
	switch {
	case v.Role != "":
		return "keep (gets new jobs)"
	case v.Pinned > 0 || v.Drainage == "draining":
		return "keep (pinned jobs open)"
	case v.Running > 0:
		// Auto-upgrading workflows (export retention, notifications) move to the current
		// version with their next task.
		return "may stop (open ones auto-upgrade)"
	default:
		return "may stop"
	}
}

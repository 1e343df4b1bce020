package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/workflows"
)

// SetupConfig configures `jobgate setup`: the one-time operator step on a Temporal that jobgate
// did not start (self-hosted or cloud). It is idempotent: run it again after an upgrade.
type SetupConfig struct {
	// Address of the Temporal frontend.
	Address string
	// Namespace holding the jobs.
	Namespace string
	// Retention for a namespace setup creates; an existing namespace is left as it is.
	Retention time.Duration
	// CreateNamespace registers Namespace when it does not exist.
	CreateNamespace bool
	// Timeout bounds the whole setup, including waiting for Temporal to answer.
	Timeout time.Duration
	// DatasetsFile is the export dataset catalog serve and the workers use. Defaults to none.
	// Setup refuses a namespace whose retention is shorter than a dataset's retention.
	DatasetsFile string
	// Datasets, if set, is used instead of DatasetsFile.
	Datasets contract.Datasets
	// Force sets up even when the namespace retention is shorter than a dataset's retention
	// (the mismatch is then only printed). Defaults to false.
	Force bool
	// TLS and credentials for the connection (the same flags as serve and worker). Defaults to
	// plaintext without credentials.
	TLS TemporalTLS
}

// Flags registers setup's flags (the same names and env vars as serve and worker).
func (c *SetupConfig) Flags(fs *flag.FlagSet) {
	ConnectionFlags(fs, &c.Address, &c.Namespace, &c.TLS)
	fs.BoolVar(&c.CreateNamespace, "create-namespace", true, "register the namespace if it does not exist")
	fs.DurationVar(&c.Retention, "retention", 7*24*time.Hour, "retention of a namespace setup creates")
	fs.DurationVar(&c.Timeout, "timeout", 2*time.Minute, "give up after this long (includes waiting for Temporal)")
	fs.StringVar(&c.DatasetsFile, "datasets", "", "export dataset catalog file (the one serve and worker use): "+
		"setup refuses a namespace retention shorter than a dataset's retention")
	fs.BoolVar(&c.Force, "force", false, "set up even when the namespace retention is shorter than a dataset's retention")
}

// SearchAttributes are the custom search attributes jobgate's workflows set and list_jobs and
// the quota check query (workflows.SearchAttributeTypes).
func SearchAttributes() map[string]enumspb.IndexedValueType {
	return workflows.SearchAttributeTypes()
}

// Setup makes a Temporal namespace ready for jobgate: it waits for the frontend, registers the
// namespace if missing (CreateNamespace), adds the search attributes the namespace lacks through
// the operator API, and returns once a visibility query over all of them succeeds. It prints one
// line per action to out. An attribute registered with another type is an error.
func Setup(ctx context.Context, c SetupConfig, log *zap.Logger, out io.Writer) error {
	if log == nil {
		log = zap.NewNop()
	}
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	datasets := c.Datasets
	if datasets == nil {
		var err error
		if datasets, err = contract.LoadDatasets(c.DatasetsFile); err != nil {
			return err
		}
	}
	tc, opts, err := DialTemporal(ctx, c.Address, c.Namespace, c.TLS, log)
	if err != nil {
		return err
	}
	defer tc.Close()

	if err := setupNamespace(ctx, c, datasets, opts, out); err != nil {
		return err
	}
	want := SearchAttributes()
	// A namespace registered a moment ago is unknown to the frontend until its namespace
	// registry refreshes (10 s by default): retry "not found" until ctx ends.
	var missing map[string]enumspb.IndexedValueType
	err = retryNotFound(ctx, func() error {
		var err error
		missing, err = missingSearchAttributes(ctx, tc, c.Namespace, want)
		return err
	})
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		err = retryNotFound(ctx, func() error {
			_, err := tc.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
				Namespace: c.Namespace, SearchAttributes: missing})
			return err
		})
		var exists *serviceerror.AlreadyExists
		if err != nil && !errors.As(err, &exists) {
			return fmt.Errorf("add search attributes to %q: %w", c.Namespace, err)
		}
		if still, err := missingSearchAttributes(ctx, tc, c.Namespace, want); err != nil {
			return err
		} else if len(still) > 0 {
			return fmt.Errorf("search attributes %v of %q were not registered", names(still), c.Namespace)
		}
		fmt.Fprintf(out, "search attributes %s: added to namespace %s\n", strings.Join(names(missing), ", "), c.Namespace)
	} else {
		fmt.Fprintf(out, "search attributes %s: already registered in namespace %s\n", strings.Join(names(want), ", "), c.Namespace)
	}
	// A frontend caches search attributes (60 s by default): wait until a query naming them all
	// is accepted, so serve and worker started right after work at once.
	query := probeQuery(want)
	start := time.Now()
	for {
		_, err := tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: c.Namespace, Query: query})
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace %q not usable for jobgate (query %q): %w", c.Namespace, query, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
	fmt.Fprintf(out, "namespace %s ready for jobgate (search attributes usable after %s)\n", c.Namespace,
		time.Since(start).Round(time.Millisecond))
	return nil
}

// retryNotFound calls f until it returns anything but a NamespaceNotFound, or ctx ends.
func retryNotFound(ctx context.Context, f func() error) error {
	for {
		err := f()
		var notFound *serviceerror.NamespaceNotFound
		if !errors.As(err, &notFound) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func setupNamespace(ctx context.Context, c SetupConfig, datasets contract.Datasets, opts client.Options, out io.Writer) error {
	nc, err := client.NewNamespaceClient(opts)
	if err != nil {
		return fmt.Errorf("namespace client: %w", err)
	}
	defer nc.Close()
	desc, err := nc.Describe(ctx, c.Namespace)
	var notFound *serviceerror.NamespaceNotFound
	switch {
	case err == nil:
		fmt.Fprintf(out, "namespace %s: exists\n", c.Namespace)
		return checkRetention(c, desc.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration(), datasets, out)
	case !errors.As(err, &notFound):
		return fmt.Errorf("describe namespace %q: %w", c.Namespace, err)
	case !c.CreateNamespace:
		return fmt.Errorf("namespace %q does not exist (create it, or run without --create-namespace=false)", c.Namespace)
	}
	// Refused before anything is registered.
	if err := checkRetention(c, c.Retention, datasets, out); err != nil {
		return err
	}
	err = nc.Register(ctx, &workflowservice.RegisterNamespaceRequest{Namespace: c.Namespace,
		Description: "jobgate jobs", WorkflowExecutionRetentionPeriod: durationpb.New(c.Retention)})
	var exists *serviceerror.NamespaceAlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("register namespace %q: %w", c.Namespace, err)
	}
	fmt.Fprintf(out, "namespace %s: registered (retention %s)\n", c.Namespace, c.Retention)
	return nil
}

// checkRetention refuses (unless c.Force, which only prints) a namespace retention shorter than
// a dataset's artifact retention.
func checkRetention(c SetupConfig, nsRetention time.Duration, datasets contract.Datasets, out io.Writer) error {
	problems := RetentionProblems(c.Namespace, nsRetention, datasets)
	if len(problems) == 0 {
		return nil
	}
	if !c.Force {
		return fmt.Errorf("%s (or run setup with --force)", strings.Join(problems, "; "))
	}
	for _, p := range problems {
		fmt.Fprintf(out, "warning (--force): %s\n", p)
	}
	return nil
}

// missingSearchAttributes lists the wanted attributes the namespace lacks; one present with
// another type is an error (the server would silently keep the old type).
func missingSearchAttributes(ctx context.Context, tc client.Client, ns string,
	want map[string]enumspb.IndexedValueType) (map[string]enumspb.IndexedValueType, error) {
	resp, err := tc.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
	if err != nil {
		return nil, fmt.Errorf("list search attributes of %q: %w", ns, err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for _, name := range names(want) {
		got, ok := resp.GetCustomAttributes()[name]
		if !ok {
			got, ok = resp.GetSystemAttributes()[name]
		}
		switch {
		case !ok:
			missing[name] = want[name]
		case got != want[name]:
			return nil, fmt.Errorf("search attribute %q of %q is registered as %v; jobgate needs %v", name, ns, got, want[name])
		}
	}
	return missing, nil
}

func probeQuery(attrs map[string]enumspb.IndexedValueType) string {
	var parts []string
	for _, name := range names(attrs) {
		probe := "'jobgate-setup-probe'"
		if attrs[name] == enumspb.INDEXED_VALUE_TYPE_INT {
			probe = "-1"
		}
		parts = append(parts, fmt.Sprintf("`%s` = %s", name, probe))
	}
	return strings.Join(parts, " AND ")
}

// names returns the attributes' names, sorted.
func names(attrs map[string]enumspb.IndexedValueType) []string {
	return slices.Sorted(maps.Keys(attrs))
}

// RunSetup is the `jobgate setup` command: flags (and their JOBGATE_* variables), then Setup.
func RunSetup(args []string, stdout, stderr io.Writer) error {
	var c SetupConfig
	fs := CommandFlags("setup", "Usage: jobgate setup [flags]\n\nMakes a Temporal namespace ready for jobgate, once per namespace (idempotent):\n"+
		"registers the namespace if missing and jobgate's Keyword search attributes\n"+
		"(Keyword JobTenant, JobOwner, JobKind, JobStatus, JobAnswerer; Int JobSlots) through the operator API.\n", stderr)
	c.Flags(fs)
	if err := BindEnv(fs); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("setup: unexpected arguments %q", fs.Args())
	}
	log, err := NewLogger("console", zap.WarnLevel)
	if err != nil {
		return err
	}
	defer log.Sync()
	return Setup(context.Background(), c, log, stdout)
}

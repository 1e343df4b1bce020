package devtemporal

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	namespacepb "go.temporal.io/api/namespace/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/server/common/log"
	"google.golang.org/protobuf/types/known/durationpb"
)

const pollInterval = 50 * time.Millisecond

// register waits for the frontend, registers the namespace and search attributes, and waits
// until a visibility query over those attributes succeeds (i.e. they are usable).
func (s *Server) register(ctx context.Context) error {
	copts := client.Options{
		HostPort:  s.frontendHostPort,
		Namespace: s.opts.Namespace,
		Logger:    log.NewSdkLogger(s.logger),
		// nil without Options.TLS: plaintext.
		ConnectionOptions: client.ConnectionOptions{TLS: s.opts.TLS.clientTLS()},
	}
	var c client.Client
	err := retry(ctx, func(ctx context.Context) error {
		dialCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var err error
		c, err = client.DialContext(dialCtx, copts)
		return err
	})
	if err != nil {
		return fmt.Errorf("devtemporal: frontend %s did not answer: %w", s.frontendHostPort, err)
	}
	defer c.Close()

	if err := s.registerNamespace(ctx, copts); err != nil {
		return err
	}
	if err := s.registerSearchAttributes(ctx, c); err != nil {
		return err
	}
	return s.waitUsable(ctx, c)
}

func (s *Server) registerNamespace(ctx context.Context, copts client.Options) error {
	nc, err := client.NewNamespaceClient(copts)
	if err != nil {
		return fmt.Errorf("devtemporal: namespace client: %w", err)
	}
	defer nc.Close()
	ns := s.opts.Namespace
	retention := durationpb.New(s.opts.Retention)
	err = nc.Register(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace:                        ns,
		Description:                      "jobgate dev namespace",
		WorkflowExecutionRetentionPeriod: retention,
	})
	var exists *serviceerror.NamespaceAlreadyExists
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &exists):
		return fmt.Errorf("devtemporal: register Options.Namespace %q: %w", ns, err)
	}
	// Already there (restart on a DataDir): keep it, but honour a changed Retention.
	desc, err := nc.Describe(ctx, ns)
	if err != nil {
		return fmt.Errorf("devtemporal: describe Options.Namespace %q: %w", ns, err)
	}
	if desc.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration() == s.opts.Retention {
		return nil
	}
	err = nc.Update(ctx, &workflowservice.UpdateNamespaceRequest{
		Namespace: ns,
		Config:    &namespacepb.NamespaceConfig{WorkflowExecutionRetentionTtl: retention},
	})
	if err != nil {
		return fmt.Errorf("devtemporal: update Options.Retention of %q: %w", ns, err)
	}
	return nil
}

func (s *Server) registerSearchAttributes(ctx context.Context, c client.Client) error {
	if len(s.opts.SearchAttributes) == 0 {
		return nil
	}
	ns := s.opts.Namespace
	// Add only what is missing: the server logs a warning per existing name, and it silently
	// skips a name that exists with another type, so compare types ourselves.
	missing, err := s.missingSearchAttributes(ctx, c)
	if err != nil || len(missing) == 0 {
		return err
	}
	_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace:        ns,
		SearchAttributes: missing,
	})
	var exists *serviceerror.AlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("devtemporal: add Options.SearchAttributes to %q: %w", ns, err)
	}
	if missing, err = s.missingSearchAttributes(ctx, c); err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("devtemporal: Options.SearchAttributes %v were not registered", sortedNames(missing))
	}
	return nil
}

// missingSearchAttributes lists the requested attributes the namespace lacks; an attribute
// present with another type is an error.
func (s *Server) missingSearchAttributes(ctx context.Context, c client.Client) (map[string]enumspb.IndexedValueType, error) {
	ns := s.opts.Namespace
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
	if err != nil {
		return nil, fmt.Errorf("devtemporal: list search attributes of %q: %w", ns, err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for _, name := range sortedNames(s.opts.SearchAttributes) {
		want := s.opts.SearchAttributes[name]
		got, ok := resp.GetCustomAttributes()[name]
		if !ok {
			got, ok = resp.GetSystemAttributes()[name]
		}
		switch {
		case !ok:
			missing[name] = want
		case got != want:
			return nil, fmt.Errorf("devtemporal: Options.SearchAttributes[%q]: already registered as %v, want %v", name, got, want)
		}
	}
	return missing, nil
}

// waitUsable retries a visibility query that names every custom search attribute: it only
// succeeds once the namespace is in the frontend's registry and the attributes resolve.
func (s *Server) waitUsable(ctx context.Context, c client.Client) error {
	query := probeQuery(s.opts.SearchAttributes)
	err := retry(ctx, func(ctx context.Context) error {
		_, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{
			Namespace: s.opts.Namespace,
			Query:     query,
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("devtemporal: namespace %q not usable (query %q): %w", s.opts.Namespace, query, err)
	}
	return nil
}

// probeQuery is a visibility query with one always-valid comparison per attribute.
func probeQuery(attrs map[string]enumspb.IndexedValueType) string {
	var parts []string
	for _, name := range sortedNames(attrs) {
		var literal string
		switch attrs[name] {
		case enumspb.INDEXED_VALUE_TYPE_INT, enumspb.INDEXED_VALUE_TYPE_DOUBLE:
			literal = "0"
		case enumspb.INDEXED_VALUE_TYPE_BOOL:
			literal = "false"
		case enumspb.INDEXED_VALUE_TYPE_DATETIME:
			literal = "'2000-01-01T00:00:00Z'"
		default: // keyword, text, keyword list
			literal = "'devtemporal-probe'"
		}
		parts = append(parts, fmt.Sprintf("`%s` = %s", name, literal))
	}
	return strings.Join(parts, " AND ")
}

// sortedNames returns the attributes' names, sorted.
func sortedNames(attrs map[string]enumspb.IndexedValueType) []string {
	return slices.Sorted(maps.Keys(attrs))
}

// retry calls f until it succeeds or ctx ends, returning f's last error in that case.
func retry(ctx context.Context, f func(context.Context) error) error {
	for {
		err := f(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}

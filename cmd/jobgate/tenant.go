package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/activities/payloadcrypt"
	"github.com/jobgate/jobgate/authz"
)

const tenantUsage = `Usage: jobgate tenant forget <tenant> --yes [flags]

Operator tool: crypto-shreds a tenant. It deletes the tenant's payload keys (so everything
jobgate wrote to Temporal for it, in the database and in every backup, is ciphertext for good)
and every artifact of its jobs (export files and manifests, eval episode logs). jobgate then
answers the tenant's jobs as not_found; Temporal keeps their histories, unreadable, until its
retention removes them. It cannot be undone. Give it the key-encryption key, key store and
artifact store serve and worker have. Running serve and worker processes stop opening the
tenant's payloads within a minute; no new key is made for the tenant (a still-running job of
it fails to write), until 'jobgate payload-keys rotate --tenant <tenant>' gives it one on purpose.
`

// runTenant is `jobgate tenant`. bindEnv gives every flag its JOBGATE_ variable (app.BindEnv).
func runTenant(args []string, stdout, stderr io.Writer, bindEnv func(*flag.FlagSet) error) error {
	if len(args) == 0 || args[0] != "forget" {
		fmt.Fprint(stderr, tenantUsage)
		return flag.ErrHelp
	}
	fs, store := newKeyStoreFlags("tenant forget", tenantUsage, "the tenant's artifacts are deleted from it; ", stderr)
	var yes bool
	fs.BoolVar(&yes, "yes", false, "required: yes, delete the tenant's keys and artifacts for good")
	if err := bindEnv(fs); err != nil {
		return err
	}
	// The tenant comes first (jobgate tenant forget acme --yes); flags may also precede it.
	rest := args[1:]
	var tenant string
	if len(rest) > 0 && len(rest[0]) > 0 && rest[0][0] != '-' {
		tenant, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return err
	}
	if tenant == "" && fs.NArg() == 1 {
		tenant = fs.Arg(0)
	} else if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("tenant forget takes one tenant, got %q and %v", tenant, fs.Args())
	}
	if tenant == "" {
		fs.Usage()
		return errors.New("tenant: required (jobgate tenant forget <tenant> --yes)")
	}
	if err := authz.ValidTenant(tenant); err != nil {
		return fmt.Errorf("tenant: %w", err)
	}
	if !yes {
		return fmt.Errorf("--yes is required: forgetting %s deletes its payload keys and artifacts for good", tenant)
	}
	if store.artifacts == "" {
		return errors.New("--artifacts: required (the tenant's artifacts live there)")
	}
	return store.with(10*time.Minute, func(ctx context.Context, keys *payloadcrypt.Opened) error {
		return forgetTenant(ctx, keys, store.artifacts, tenant, stdout)
	})
}

// forgetTenant is tenant forget's work: the tenant's payload keys, then its artifacts.
func forgetTenant(ctx context.Context, keys *payloadcrypt.Opened, artifactsURL, tenant string, stdout io.Writer) error {
	// Keys first: once they are gone nothing of the tenant's reads again, whatever happens to
	// the artifacts' deletion (which a rerun finishes).
	nk, err := keys.Forget(ctx, tenant)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\tpayload keys deleted: %d (its payloads in Temporal no longer open)\n", tenant, nk)
	artifacts, err := activities.OpenArtifactStore(ctx, artifactsURL)
	if err != nil {
		return err
	}
	defer artifacts.Close()
	na, err := artifacts.ForgetTenant(ctx, tenant)
	if err != nil {
		return fmt.Errorf("artifacts of %s (%d deleted; run again to finish): %w", tenant, na, err)
	}
	fmt.Fprintf(stdout, "%s\tartifacts deleted: %d\n", tenant, na)
	return nil
}

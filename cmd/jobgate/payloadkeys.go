package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jobgate/jobgate/activities/payloadcrypt"
)

const payloadKeysUsage = `Usage: jobgate payload-keys list|rotate --tenant T[,T2…] [flags]

Operator tool for the tenants' payload keys (the data keys that encrypt what jobgate writes to
Temporal), with the key-encryption key and store serve and worker use:
  list     each tenant's key IDs, oldest first; the last one seals new payloads
  rotate   add a new key per tenant: serve and worker seal with it within a minute (their
           cache of the newest key), and every older key keeps opening what it sealed
`

// runPayloadKeys is `jobgate payload-keys`. bindEnv gives every flag its JOBGATE_ variable, as
// serve's and worker's have (main.go passes app.BindEnv: only main.go links cmd/app).
func runPayloadKeys(args []string, stdout, stderr io.Writer, bindEnv func(*flag.FlagSet) error) error {
	if len(args) == 0 || (args[0] != "list" && args[0] != "rotate") {
		fmt.Fprint(stderr, payloadKeysUsage)
		return flag.ErrHelp
	}
	verb := args[0]
	fs := flag.NewFlagSet("payload-keys "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, payloadKeysUsage+"\nFlags:\n"); fs.PrintDefaults() }
	var cfg payloadcrypt.Config
	var artifacts, tenants string
	cfg.Flags(fs)
	fs.StringVar(&artifacts, "artifacts", "", "the artifact store URL serve and worker have (its keys/ prefix is the default key store)")
	fs.StringVar(&tenants, "tenant", "", "required: the tenants, comma-separated")
	if err := bindEnv(fs); err != nil {
		return err
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if tenants == "" {
		fs.Usage()
		return errors.New("--tenant is required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	keys, err := cfg.Open(ctx, artifacts, payloadcrypt.Options{})
	if err != nil {
		return err
	}
	defer keys.Close()
	for _, t := range strings.Split(tenants, ",") {
		t = strings.TrimSpace(t)
		if verb == "rotate" {
			id, err := keys.Add(ctx, t)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s\t%s\tadded: seals new payloads from now on (serve and worker within a minute)\n", t, id)
			continue
		}
		ids, err := keys.List(ctx, t)
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			fmt.Fprintf(stdout, "%s\t-\tno key yet: one is made on the tenant's first job\n", t)
		}
		for i, id := range ids {
			note := "opens older payloads"
			if i == len(ids)-1 {
				note = "newest: seals new payloads"
			}
			fmt.Fprintf(stdout, "%s\t%s\t%s\n", t, id, note)
		}
	}
	return nil
}

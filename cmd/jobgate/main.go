package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/cmd/app/replay"
)

const usage = `jobgate — durable, multi-tenant jobs for AI agents, on Temporal, over MCP.

Usage:
  jobgate dev      [flags]   run everything in one process (start here)
  jobgate serve    [flags]   run the stateless MCP frontend (any number of replicas)
  jobgate worker   [flags]   run a Temporal worker that executes jobs
  jobgate temporal [flags]   run the embedded Temporal server (SQLite) and Web UI alone
  jobgate setup    [flags]   one-time: make your own Temporal's namespace ready (search attributes)
  jobgate deploy   status | set-current <build-id> | ramp <build-id> <percent>
                             roll worker versions: running jobs finish on their build (cmd/app/README.md)
  jobgate replay   [flags]   before a release: replay recent histories against this binary's workflows (exit 1: non-determinism)
  jobgate token    [flags]   mint a dev HS256 bearer token
  jobgate keygen   payload-kek|signing-keys|resume-keys|handle-keys [-o file]
                             make a fresh key for serve's and worker's key flags (dev; production: a KMS KEK)
  jobgate payload-keys list|rotate --tenant T
                             the tenants' payload encryption keys: list them, or add a newer one
  jobgate tenant forget <tenant> --yes
                             crypto-shred a tenant: delete its payload keys and artifacts for good

Sign in (people; the client commands then need no token):
  jobgate login  [--browser]                sign in at the server's identity provider (device code by default)
  jobgate whoami                            who the client commands act as: issuer, subject, tenant, scopes
  jobgate logout                            revoke and delete the stored sign-in

Clients (MCP clients of --url, env JOBGATE_URL, with --token, env JOBGATE_TOKEN, else your 'jobgate login'):
  jobgate jobs list [--wide]                list your jobs (pages with the cursor)
  jobgate jobs get <job>                    show one job: status, progress, input request, result
  jobgate jobs watch <job>                  follow a job to the end (exit 0 only if it succeeded)
  jobgate jobs download <job> [-o file]     fetch a succeeded export's file, SHA-256 verified
  jobgate jobs describe|episodes <job>      a job's timeline; an eval's episodes
  jobgate approvals list [--kind k]         jobs waiting for your approval (jobs:approve)
  jobgate approvals approve <job>           approve the job's open request [--comment text]
  jobgate approvals reject <job>            reject it [--comment text]
  jobgate usage [--since 720h] [--by owner|kind]
                                            what your tenant's finished jobs used (jobs:admin)
  <job> is a handle or a job ID from 'jobgate jobs list'. Every client command takes --json:
  the tool's structured result, unchanged, on stdout.

Audit (no secret: the deployment's public signing keys only):
  jobgate verify <manifest.json> [--keys-file F | --keys-url U] [--artifact P]
                                            check an export's Ed25519-signed manifest, its decision
                                            record and the artifact's digests (legacy HMAC-sealed
                                            ones: --allow-legacy --resume-keys-file F)

Shell:
  jobgate completion bash|zsh|fish          print a completion script for commands and flags
  jobgate version [--json]                  this binary's version and build ID (VCS revision, modified)

Every server flag has an environment variable: --temporal-address is JOBGATE_TEMPORAL_ADDRESS.
Run 'jobgate <command> -h' for a command's flags. Exit status: 0 ok, 1 refused by the server
(a tool error such as forbidden or not_found) or the job failed, 2 usage or connection error.
`

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "jobgate:", err)
		}
		os.Exit(exitCode(err))
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "dev":
		return runDev(args, stdout, stderr)
	case "serve":
		return runServe(args, stderr)
	case "worker":
		return runWorker(args, stderr)
	case "temporal":
		return runTemporal(args, stdout, stderr)
	case "setup":
		return app.RunSetup(args, stdout, stderr)
	case "deploy":
		return app.RunDeploy(args, stdout, stderr)
	case "replay":
		if err := replay.RunReplay(args, stdout, stderr); errors.Is(err, replay.ErrReplayFailed) {
			return &exitError{code: 1, err: err}
		} else {
			return err
		}
	case "token":
		return runToken(args, stdout, stderr)
	case "payload-keys":
		return runPayloadKeys(args, stdout, stderr, app.BindEnv)
	case "keygen":
		return runKeygen(args, stdout, stderr)
	case "tenant":
		return runTenant(args, stdout, stderr, app.BindEnv)
	case "jobs":
		return runJobs(args, stdout, stderr)
	case "approvals":
		return runApprovals(args, stdout, stderr)
	case "usage":
		return runUsage(args, stdout, stderr)
	case "verify":
		return runVerify(args, stdout, stderr)
	case "login":
		return runLogin(args, stdout, stderr)
	case "logout":
		return runLogout(args, stdout, stderr)
	case "whoami":
		return runWhoami(args, stdout, stderr)
	case "version":
		return runVersion(args, stdout, stderr)
	case "completion":
		return runCompletion(args, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}

// newFlagSet is a command's flag set, as app.CommandFlags makes setup's, deploy's and replay's:
// -h prints the usage line, summary, then the flags.
func newFlagSet(name, summary string, stderr io.Writer) *flag.FlagSet {
	return app.CommandFlags(name, "Usage: jobgate "+name+" [flags]\n\n"+summary+"\n", stderr)
}

// commandFlags is the flag set of a command whose usage text is its own (payload-keys, tenant
// forget): -h prints usage, then the flags.
var commandFlags = app.CommandFlags

// A subcommand is one command of a group ("jobgate jobs list"): its names (the first is the
// one an unknown command's error lists) and what runs it.
type subcommand struct {
	names []string
	run   func(args []string, stdout, stderr io.Writer) error
}

// runGroup runs the subcommand of group args[0] names; with none, or help, it prints usage.
func runGroup(group, usage string, cmds []subcommand, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
	}
	var want []string
	for _, c := range cmds {
		if slices.Contains(c.names, args[0]) {
			return c.run(args[1:], stdout, stderr)
		}
		want = append(want, c.names[0])
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown %s command %q (want: %s)", group, args[0], strings.Join(want, ", "))
}

// untilInterrupted is the context a command runs in: done once SIGINT or SIGTERM arrives.
func untilInterrupted() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// untilSignal runs a Main until SIGINT/SIGTERM, then closes it.
func untilSignal(start func(context.Context) error, closeFn func() error) error {
	ctx, stop := untilInterrupted()
	defer stop()
	if err := start(ctx); err != nil {
		_ = closeFn()
		return err
	}
	<-ctx.Done()
	stop()
	return closeFn()
}

// process is a long-running command: its Main's Run and Close, built once flags and logger exist.
type process struct {
	run   func(context.Context) error
	close func() error
}

// runProcess parses flags (plus --log-format and --log-level), builds the logger, and runs the
// Main until SIGINT/SIGTERM.
func runProcess(args []string, stderr io.Writer, name, summary, format string, register func(*flag.FlagSet),
	build func(*zap.Logger) process) error {
	fs := newFlagSet(name, summary, stderr)
	register(fs)
	level := "info"
	fs.StringVar(&format, "log-format", format, "log format: json or console")
	fs.StringVar(&level, "log-level", level, "log level: debug, info, warn, error")
	if err := app.BindEnv(fs); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := newLogger(format, level)
	if err != nil {
		return err
	}
	defer log.Sync()
	p := build(log)
	return untilSignal(p.run, p.close)
}

func runDev(args []string, stdout, stderr io.Writer) error {
	var c app.DevConfig
	return runProcess(args, stderr, "dev", "Runs an embedded Temporal server (SQLite, WAL) with its Web UI, a worker and the MCP\n"+
		"frontend in one process, and prints ready-to-use tokens. Restarting keeps every job.", "console", c.Flags,
		func(log *zap.Logger) process {
			m := &app.DevMain{Config: c, Logger: log, Out: stdout}
			return process{m.Run, m.Close}
		})
}

func runServe(args []string, stderr io.Writer) error {
	var c app.ServeConfig
	return runProcess(args, stderr, "serve", "Runs the stateless MCP frontend (POST /mcp, RFC 9728 metadata, /healthz, /readyz).\n"+
		"Replicas share nothing but Temporal, the token secret and the handle keys.", "json", c.Flags,
		func(log *zap.Logger) process {
			m := &app.ServeMain{Config: c, Logger: log}
			return process{m.Run, m.Close}
		})
}

func runWorker(args []string, stderr io.Writer) error {
	var c app.WorkerConfig
	return runProcess(args, stderr, "worker", "Runs a Temporal worker executing jobgate workflows and episode activities.", "json", c.Flags,
		func(log *zap.Logger) process {
			m := &app.WorkerMain{Config: c, Logger: log}
			return process{m.Run, m.Close}
		})
}

func runTemporal(args []string, stdout, stderr io.Writer) error {
	var c app.TemporalConfigDev
	return runProcess(args, stderr, "temporal", "Runs the embedded Temporal server (SQLite file, WAL) and its Web UI as a process of its own,\n"+
		"with jobgate's search attributes registered; point serve and worker at it. Restarting keeps every job.", "console", c.Flags,
		func(log *zap.Logger) process {
			m := &app.TemporalMain{Config: c, Logger: log.Named("temporal"), Out: stdout}
			return process{m.Run, m.Close}
		})
}

func runToken(args []string, stdout, stderr io.Writer) error {
	var tenant, sub, scope, secretFile, issuer, audience, dataDir string
	var ttl time.Duration
	fs := newFlagSet("token", "Mints an HS256 token. By default it signs with the dev stack's secret in --data-dir,\n"+
		"so the token works against 'jobgate dev'.", stderr)
	fs.StringVar(&tenant, "tenant", "acme", "tenant claim")
	fs.StringVar(&sub, "sub", "ana", "subject (the principal)")
	fs.StringVar(&scope, "scope", "jobs:read jobs:write", "space-separated scopes: jobs:read jobs:write jobs:approve jobs:admin")
	fs.DurationVar(&ttl, "ttl", time.Hour, "lifetime")
	fs.StringVar(&dataDir, "data-dir", ".jobgate", "dev stack data dir holding dev-token-secret (used unless --secret-file)")
	fs.StringVar(&secretFile, "secret-file", "", "HS256 secret file (as given to 'serve --hs256-secret-file'); the secret is the file's hex or raw content")
	fs.StringVar(&issuer, "issuer", app.DevIssuer, "iss claim")
	fs.StringVar(&audience, "audience", "http://localhost:8080/mcp", "aud claim: the server's resource URI")
	if err := fs.Parse(args); err != nil {
		return err
	}
	scopes, err := authz.ParseScopes(scope)
	if err != nil {
		return err
	}
	secret, err := app.LoadTokenSecret(secretFile, dataDir)
	if err != nil {
		return err
	}
	tok, err := authz.MintHS256(secret, authz.MintOptions{Issuer: issuer, Audience: audience, Tenant: tenant,
		Subject: sub, Scopes: scopes, TTL: ttl})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
}

func newLogger(format, level string) (*zap.Logger, error) {
	var l zapcore.Level
	if err := l.UnmarshalText([]byte(strings.ToLower(level))); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", level, err)
	}
	return app.NewLogger(format, l)
}

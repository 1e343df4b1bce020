package tests

// Offline checks of the deployment files (no Docker engine, no network): docker-compose.yml is
// loaded with compose-go the way `docker compose` loads it, the Dockerfile and cmd/deploy/nginx.conf
// are parsed by hand. The jobgate flag sets are the real ones: the binary is built exactly as
// the Dockerfile builds it (CGO_ENABLED=0, -trimpath) and asked `<command> -h`, and that list
// is cross-checked against the Config.Flags of cmd/app, so a renamed or removed flag fails here.

import (
	"context"
	"flag"
	"fmt"
	"go/version"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobgate/jobgate/activities"
	"github.com/jobgate/jobgate/activities/testenv"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/frontend"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/workflows"
)

const composeRoot = ".." // the repository root, from tests/

const composeJobgateImage = "jobgate:local"

func composeProject(t *testing.T) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{filepath.Join(composeRoot, "docker-compose.yml")},
		cli.WithWorkingDirectory(composeRoot), cli.WithOsEnv, cli.WithDotEnv, cli.WithResolvedPaths(true))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("docker-compose.yml does not load: %v", err)
	}
	return p
}

// composeFlags is one jobgate command's flags and the environment variable of each.
type composeFlags struct {
	names map[string]bool // flag name → takes a value (not a bool flag)
	envs  map[string]bool // JOBGATE_… → true
}

var composeHelpLine = regexp.MustCompile(`(?m)^  -([A-Za-z0-9][A-Za-z0-9-]*)( [a-z]+)?\n\s+.*\(env (JOBGATE_[A-Z0-9_]+)\)`)

// composeCommandFlags runs `jobgate <cmd> -h` (with a clean JOBGATE_* environment) and parses
// the flag list that BindEnv annotated with each flag's variable.
func composeCommandFlags(t *testing.T, bin, cmd string) composeFlags {
	t.Helper()
	c := exec.Command(bin, cmd, "-h")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "JOBGATE_") {
			c.Env = append(c.Env, kv)
		}
	}
	out, _ := c.CombinedOutput() // -h exits non-zero by design
	f := composeFlags{names: map[string]bool{}, envs: map[string]bool{}}
	for _, m := range composeHelpLine.FindAllStringSubmatch(string(out), -1) {
		f.names[m[1]] = m[2] != ""
		f.envs[m[3]] = true
		if want := "JOBGATE_" + strings.ToUpper(strings.ReplaceAll(m[1], "-", "_")); m[3] != want {
			t.Errorf("jobgate %s: flag -%s is bound to %s, want %s", cmd, m[1], m[3], want)
		}
	}
	if len(f.names) == 0 {
		t.Fatalf("jobgate %s -h listed no flags:\n%s", cmd, out)
	}
	return f
}

// composeAppFlags are the flags cmd/app registers for a command (main adds --log-format and
// --log-level to serve and worker): the parsed help must contain all of them.
func composeAppFlags(cmd string) []string {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	switch cmd {
	case "serve":
		var c app.ServeConfig
		c.Flags(fs)
	case "worker":
		var c app.WorkerConfig
		c.Flags(fs)
	case "setup":
		var c app.SetupConfig
		c.Flags(fs)
	default:
		return nil
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}

func composeIsJobgate(s types.ServiceConfig) bool { return s.Image == composeJobgateImage }

func composeSubcommand(s types.ServiceConfig) string {
	if len(s.Command) == 0 {
		return "serve" // the image's CMD
	}
	return s.Command[0]
}

func composeEnv(s types.ServiceConfig, name string) string {
	if v, ok := s.Environment[name]; ok && v != nil {
		return *v
	}
	return ""
}

// composeSetting is a jobgate setting from the command line (--flag value, --flag=value) or,
// failing that, its environment variable.
func composeSetting(s types.ServiceConfig, flagName string) string {
	args := s.Command
	for i := 1; i < len(args); i++ {
		a := strings.TrimLeft(args[i], "-")
		if a == flagName && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flagName+"="); ok {
			return v
		}
	}
	return composeEnv(s, "JOBGATE_"+strings.ToUpper(strings.ReplaceAll(flagName, "-", "_")))
}

func composeServicesByCommand(p *types.Project, cmd string) []types.ServiceConfig {
	var out []types.ServiceConfig
	for _, name := range p.ServiceNames() {
		s := p.Services[name]
		if composeIsJobgate(s) && composeSubcommand(s) == cmd {
			out = append(out, s)
		}
	}
	return out
}

// composeOneShots are the services others wait for with service_completed_successfully.
func composeOneShots(p *types.Project) map[string]bool {
	out := map[string]bool{}
	for _, s := range p.Services {
		for dep, d := range s.DependsOn {
			if d.Condition == types.ServiceConditionCompletedSuccessfully {
				out[dep] = true
			}
		}
	}
	return out
}

func composeRel(t *testing.T, path string) string {
	t.Helper()
	root, err := filepath.Abs(composeRoot)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(root, path)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.ToSlash(rel)
}

func TestComposeJobgateFlagsAreReal(t *testing.T) {
	testenv.Heavy(t, "builds and runs the jobgate binary")
	p := composeProject(t)
	bin := jobgateBinary(t)
	sets := map[string]composeFlags{}
	n := 0
	for _, name := range p.ServiceNames() {
		s := p.Services[name]
		if !composeIsJobgate(s) {
			continue
		}
		n++
		cmd := composeSubcommand(s)
		fl, ok := sets[cmd]
		if !ok {
			fl = composeCommandFlags(t, bin, cmd)
			for _, want := range composeAppFlags(cmd) {
				if _, ok := fl.names[want]; !ok {
					t.Fatalf("parsed `jobgate %s -h` lacks -%s that cmd/app registers: the help parser is broken", cmd, want)
				}
			}
			sets[cmd] = fl
		}
		for i := 1; i < len(s.Command); i++ {
			a := s.Command[i]
			if !strings.HasPrefix(a, "-") {
				t.Errorf("%s: stray argument %q to jobgate %s", name, a, cmd)
				continue
			}
			f, _, inline := strings.Cut(strings.TrimLeft(a, "-"), "=")
			takesValue, ok := fl.names[f]
			if !ok {
				t.Errorf("%s: jobgate %s has no flag %q", name, cmd, a)
			}
			if takesValue && !inline {
				i++ // its value
			}
		}
		for k := range s.Environment {
			if strings.HasPrefix(k, "JOBGATE_") && !fl.envs[k] {
				t.Errorf("%s: %s is not the variable of any flag of jobgate %s", name, k, cmd)
			}
		}
	}
	if n == 0 {
		t.Fatalf("no service runs image %s", composeJobgateImage)
	}
	for _, cmd := range []string{"serve", "worker", "setup"} {
		if len(composeServicesByCommand(p, cmd)) == 0 {
			t.Errorf("no service runs jobgate %s", cmd)
		}
	}
}

// composeLB is the load balancer: the service that mounts cmd/deploy/nginx.conf.
func composeLB(t *testing.T, p *types.Project) (types.ServiceConfig, string) {
	t.Helper()
	for _, s := range p.Services {
		for _, c := range s.Configs {
			if cfg, ok := p.Configs[c.Source]; ok && composeRel(t, cfg.File) == "cmd/deploy/nginx.conf" {
				return s, cfg.File
			}
		}
	}
	t.Fatal("no service mounts cmd/deploy/nginx.conf")
	return types.ServiceConfig{}, ""
}

var (
	composeNginxUpstream = regexp.MustCompile(`(?s)upstream\s+([A-Za-z0-9_]+)\s*\{(.*?)\}`)
	composeNginxServer   = regexp.MustCompile(`(?m)^\s*server\s+([A-Za-z0-9._-]+):([0-9]+)\b`)
	composeNginxListen   = regexp.MustCompile(`(?m)^\s*listen\s+([0-9]+)\s*;`)
	composeNginxPass     = regexp.MustCompile(`(?m)^\s*proxy_pass\s+http://([A-Za-z0-9_]+)\s*;`)
)

func TestComposeOneResourceURIBehindOneLB(t *testing.T) {
	p := composeProject(t)
	frontends := composeServicesByCommand(p, "serve")
	if len(frontends) < 2 {
		t.Fatalf("want at least two frontend replicas, have %d", len(frontends))
	}
	lb, confPath := composeLB(t, p)
	conf, err := os.ReadFile(confPath)
	if err != nil {
		t.Fatal(err)
	}

	// The LB listens on one port, published once; the resource URI is that published address.
	listens := composeNginxListen.FindAllStringSubmatch(string(conf), -1)
	if len(listens) != 1 {
		t.Fatalf("nginx.conf: want one listen port, have %v", listens)
	}
	var published []string
	for _, pc := range lb.Ports {
		if fmt.Sprint(pc.Target) == listens[0][1] {
			published = append(published, pc.Published)
		}
	}
	if len(lb.Ports) != 1 || len(published) != 1 {
		t.Fatalf("%s: want exactly one published port, to nginx's listen %s; have %+v", lb.Name, listens[0][1], lb.Ports)
	}

	uris := map[string]bool{}
	for _, s := range frontends {
		u := composeSetting(s, "resource-uri")
		if u == "" {
			t.Errorf("%s: no resource URI set (the default would differ from the LB's)", s.Name)
		}
		uris[u] = true
		if len(s.Ports) > 0 {
			t.Errorf("%s publishes %+v: frontends are reached only through the load balancer", s.Name, s.Ports)
		}
	}
	if len(uris) != 1 {
		t.Fatalf("frontend replicas disagree on the resource URI: %v", slices.Sorted(maps.Keys(uris)))
	}
	for raw := range uris {
		u, err := url.Parse(raw)
		if err != nil || u.Hostname() == "" {
			t.Fatalf("resource URI %q: %v", raw, err)
		}
		if u.Port() != published[0] {
			t.Errorf("resource URI %s: port %q, the load balancer is published on %s", raw, u.Port(), published[0])
		}
		if u.Path != "/mcp" {
			t.Errorf("resource URI %s: path %q, the MCP endpoint is /mcp", raw, u.Path)
		}
	}

	// Upstreams are exactly the frontend replicas, on the port each listens on.
	ups := composeNginxUpstream.FindAllStringSubmatch(string(conf), -1)
	if len(ups) != 1 {
		t.Fatalf("nginx.conf: want one upstream block, have %d", len(ups))
	}
	passes := composeNginxPass.FindAllStringSubmatch(string(conf), -1)
	if len(passes) == 0 {
		t.Fatal("nginx.conf: no proxy_pass")
	}
	for _, m := range passes {
		if m[1] != ups[0][1] {
			t.Errorf("nginx.conf: proxy_pass to %q, not the upstream %q", m[1], ups[0][1])
		}
	}
	got := map[string]string{}
	for _, m := range composeNginxServer.FindAllStringSubmatch(ups[0][2], -1) {
		got[m[1]] = m[2]
	}
	want := map[string]string{}
	for _, s := range frontends {
		_, port, ok := strings.Cut(composeSetting(s, "listen"), ":")
		if !ok {
			t.Errorf("%s: listen address %q has no port", s.Name, composeSetting(s, "listen"))
		}
		if strings.HasPrefix(composeSetting(s, "listen"), "127.") {
			t.Errorf("%s listens on loopback only: the LB cannot reach it", s.Name)
		}
		want[s.Name] = port
		if s.Deploy != nil && s.Deploy.Replicas != nil && *s.Deploy.Replicas != 1 {
			t.Errorf("%s: deploy.replicas %d; name each frontend replica so the LB lists it", s.Name, *s.Deploy.Replicas)
		}
		if d, ok := lb.DependsOn[s.Name]; !ok || d.Condition != types.ServiceConditionHealthy {
			t.Errorf("%s does not wait for %s to be healthy", lb.Name, s.Name)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("nginx.conf upstream servers %v, frontend replicas %v", got, want)
	}

	// Links in job views go to the published Web UI.
	ui := p.Services["temporal-ui"]
	for _, s := range frontends {
		u, err := url.Parse(composeSetting(s, "ui-base-url"))
		if err != nil || len(ui.Ports) != 1 || u.Port() != ui.Ports[0].Published {
			t.Errorf("%s: ui-base-url %q is not the Web UI's published port %+v", s.Name, composeSetting(s, "ui-base-url"), ui.Ports)
		}
		if f := composeSetting(s, "ui-url-for"); f != "" && f != frontend.UIURLForAdmin && f != frontend.UIURLForNone {
			t.Errorf("%s: ui-url-for %q hands Web UI links to every tenant", s.Name, f)
		}
	}
	// The Web UI is an operator tool: loopback only and read-only (no "Send Update" to a job).
	for _, pc := range ui.Ports {
		if pc.HostIP != "127.0.0.1" {
			t.Errorf("%s publishes %s on %q: bind it to 127.0.0.1", ui.Name, pc.Published, pc.HostIP)
		}
	}
	if v := composeEnv(ui, "TEMPORAL_DISABLE_WRITE_ACTIONS"); v != "true" {
		t.Errorf("%s: TEMPORAL_DISABLE_WRITE_ACTIONS=%q, want true", ui.Name, v)
	}
}

var composePinnedTag = regexp.MustCompile(`^[a-z0-9./_-]+:v?[0-9]+\.[0-9]+\.[0-9]+(?:-[A-Za-z0-9.-]+)?(?:@sha256:[0-9a-f]{64})?$`)
var composeDigest = regexp.MustCompile(`^[a-z0-9./_-]+(?::[A-Za-z0-9._-]+)?@sha256:[0-9a-f]{64}$`)

// PostgreSQL numbers its releases major.minor (17.6 is an exact release since version 10).
var composePostgresTag = regexp.MustCompile(`^postgres:[0-9]+\.[0-9]+(?:-[A-Za-z0-9.-]+)?(?:@sha256:[0-9a-f]{64})?$`)

func composeImagePinned(image string) bool {
	return composePinnedTag.MatchString(image) || composeDigest.MatchString(image) || composePostgresTag.MatchString(image)
}

func TestComposeImagesPinned(t *testing.T) {
	p := composeProject(t)
	for _, name := range p.ServiceNames() {
		s := p.Services[name]
		if s.Build != nil {
			if s.Image != composeJobgateImage {
				t.Errorf("%s: built locally, want image %s, have %q", name, composeJobgateImage, s.Image)
			}
			continue
		}
		if !composeImagePinned(s.Image) {
			t.Errorf("%s: image %q is not pinned to an exact version (x.y.z or a digest)", name, s.Image)
		}
	}
	for _, bad := range []string{"postgres", "postgres:latest", "postgres:17", "postgres:17-alpine", "temporalio/server:1.32", "nginx:alpine"} {
		if composeImagePinned(bad) {
			t.Fatalf("pin check accepts %q", bad)
		}
	}
	// Schema tool and server are one release.
	at, srv := p.Services["temporal-schema"].Image, p.Services["temporal"].Image
	if !strings.HasPrefix(at, "temporalio/admin-tools:") || !strings.HasPrefix(srv, "temporalio/server:") ||
		strings.TrimPrefix(at, "temporalio/admin-tools:") != strings.TrimPrefix(srv, "temporalio/server:") {
		t.Errorf("temporal-schema runs %q, temporal runs %q: want temporalio/admin-tools and temporalio/server of one version", at, srv)
	}
}

func TestComposeHealthAndOrder(t *testing.T) {
	p := composeProject(t)
	oneShots := composeOneShots(p)
	for _, name := range p.ServiceNames() {
		s := p.Services[name]
		if oneShots[name] {
			if s.Restart != "" && s.Restart != "no" {
				t.Errorf("one-shot %s: restart %q would run it again after it succeeded", name, s.Restart)
			}
			continue
		}
		if s.HealthCheck == nil || s.HealthCheck.Disable || len(s.HealthCheck.Test) < 2 || s.HealthCheck.Test[0] == "NONE" {
			t.Errorf("%s: long-running service without a health check", name)
		}
		for dep, d := range s.DependsOn {
			switch d.Condition {
			case types.ServiceConditionHealthy:
				if hc := p.Services[dep].HealthCheck; hc == nil || hc.Disable {
					t.Errorf("%s waits for %s to be healthy, which has no health check", name, dep)
				}
			case types.ServiceConditionCompletedSuccessfully:
			default:
				t.Errorf("%s depends on %s with condition %q: want service_healthy or service_completed_successfully", name, dep, d.Condition)
			}
		}
	}
	for _, s := range composeServicesByCommand(p, "serve") {
		test := strings.Join(s.HealthCheck.Test, " ")
		if !strings.Contains(test, "/healthz") || !strings.Contains(test, "/readyz") {
			t.Errorf("%s: health check %q does not ask /healthz and /readyz", s.Name, test)
		}
	}
	// jobgate setup runs once, before any frontend or worker, against their Temporal namespace.
	setups := composeServicesByCommand(p, "setup")
	if len(setups) != 1 || !oneShots[setups[0].Name] {
		t.Fatalf("want one one-shot `jobgate setup` service, have %d", len(setups))
	}
	setup := setups[0]
	for _, cmd := range []string{"serve", "worker"} {
		for _, s := range composeServicesByCommand(p, cmd) {
			if d, ok := s.DependsOn[setup.Name]; !ok || d.Condition != types.ServiceConditionCompletedSuccessfully {
				t.Errorf("%s does not wait for %s to complete", s.Name, setup.Name)
			}
			for _, f := range []string{"temporal-address", "namespace"} {
				if composeSetting(s, f) != composeSetting(setup, f) {
					t.Errorf("%s: %s %q, setup used %q", s.Name, f, composeSetting(s, f), composeSetting(setup, f))
				}
			}
		}
	}
	// The probe the health checks call is in the image.
	df := composeReadDockerfile(t)
	for _, name := range p.ServiceNames() {
		s := p.Services[name]
		if composeIsJobgate(s) && s.HealthCheck != nil && len(s.HealthCheck.Test) > 1 {
			bin := s.HealthCheck.Test[1]
			if !strings.Contains(df, filepath.Base(bin)) || !strings.Contains(df, filepath.Dir(bin)+"/") {
				t.Errorf("%s: health check runs %s, which the Dockerfile does not install", name, bin)
			}
		}
	}
}

var composeSecretishEnv = regexp.MustCompile(`(?i)(secret|passw|pwd|token|keys?$|_key_|credential)`)

func TestComposeSecretsAreFiles(t *testing.T) {
	p := composeProject(t)
	contents := map[string]string{}
	for name, sec := range p.Secrets {
		if sec.File == "" || sec.Environment != "" || sec.Content != "" {
			t.Errorf("secret %s: want a file, have %+v", name, sec)
			continue
		}
		rel := composeRel(t, sec.File)
		if !strings.HasPrefix(rel, "cmd/deploy/") || !strings.Contains(filepath.Base(rel), "DEV-ONLY") {
			t.Errorf("secret %s: %s is not a DEV-ONLY placeholder under cmd/deploy/", name, rel)
		}
		b, err := os.ReadFile(sec.File)
		if err != nil {
			t.Errorf("secret %s: %v", name, err)
			continue
		}
		contents[name] = strings.TrimSpace(string(b))
	}
	for _, name := range p.ServiceNames() {
		s := p.Services[name]
		mounted := map[string]bool{}
		for _, ref := range s.Secrets {
			if _, ok := p.Secrets[ref.Source]; !ok {
				t.Errorf("%s: secret %q is not declared", name, ref.Source)
			}
			target := ref.Target
			if target == "" {
				target = ref.Source
			}
			if !strings.HasPrefix(target, "/") {
				target = "/run/secrets/" + target
			}
			mounted[target] = true
		}
		for k, v := range s.Environment {
			if v == nil {
				continue
			}
			for sec, c := range contents {
				if c != "" && strings.Contains(*v, c) {
					t.Errorf("%s: %s carries the value of secret %s: mount it as a file", name, k, sec)
				}
			}
			if strings.HasSuffix(k, "_FILE") {
				if strings.HasPrefix(*v, "/run/secrets/") && !mounted[*v] {
					t.Errorf("%s: %s=%s, but no secret is mounted there", name, k, *v)
				}
			} else if composeSecretishEnv.MatchString(k) {
				t.Errorf("%s: %s looks like a secret passed as an environment value; use a file", name, k)
			}
		}
		if composeIsJobgate(s) {
			for _, a := range s.Command {
				for _, k := range []string{"handle-keys", "resume-keys"} {
					if f := strings.TrimLeft(a, "-"); f == k || strings.HasPrefix(f, k+"=") {
						t.Errorf("%s: --%s on the command line; use --%s-file", name, k, k)
					}
				}
			}
		}
	}
	// Every frontend verifies tokens (HS256 file or JWKS) and signs handles with the shared keys.
	for _, s := range composeServicesByCommand(p, "serve") {
		if composeSetting(s, "jwks-url") == "" {
			f := composeSetting(s, "hs256-secret-file")
			sec := composeSecretAt(t, p, s, f)
			if len(contents[sec]) < authz.MinHS256SecretBytes {
				t.Errorf("%s: HS256 secret %s is shorter than %d bytes", s.Name, sec, authz.MinHS256SecretBytes)
			}
		}
		sec := composeSecretAt(t, p, s, composeSetting(s, "handle-keys-file"))
		if _, err := handle.ParseKeyring(contents[sec]); err != nil {
			t.Errorf("%s: handle keys %s: %v", s.Name, sec, err)
		}
	}
	// Frontends seal answers and the workers that run workflow tasks (those on the frontends'
	// task queue) verify them with one resume keyring of its own, which no other service holds
	// (it is the power to approve): least of all an episode worker on a suite's queue, which runs
	// caller-influenced commands and no workflow task.
	resumeSecret := ""
	holders := map[string]bool{}
	for _, cmd := range []string{"serve", "worker"} {
		for _, s := range composeServicesByCommand(p, cmd) {
			if q := composeSetting(s, "task-queue"); cmd == "worker" && q != "" && q != workflows.TaskQueueDefault {
				continue // checked below: it must not hold the resume keys
			}
			holders[s.Name] = true
			sec := composeSecretAt(t, p, s, composeSetting(s, "resume-keys-file"))
			if _, err := handle.ParseKeyring(contents[sec]); err != nil {
				t.Errorf("%s: resume keys %s: %v", s.Name, sec, err)
			}
			if resumeSecret == "" {
				resumeSecret = sec
			} else if sec != resumeSecret {
				t.Errorf("%s: resume keys %s, others use %s", s.Name, sec, resumeSecret)
			}
			if hk := composeSetting(s, "handle-keys-file"); hk != "" && contents[composeSecretAt(t, p, s, hk)] == contents[sec] {
				t.Errorf("%s: the resume keys are the handle keys", s.Name)
			}
		}
	}
	for _, name := range p.ServiceNames() {
		for _, ref := range p.Services[name].Secrets {
			if ref.Source == resumeSecret && !holders[name] {
				t.Errorf("%s holds the resume keys but is no frontend or worker", name)
			}
		}
	}
}

// composeSecretAt is the secret mounted at path in s.
func composeSecretAt(t *testing.T, p *types.Project, s types.ServiceConfig, path string) string {
	t.Helper()
	for _, ref := range s.Secrets {
		target := ref.Target
		if target == "" {
			target = ref.Source
		}
		if !strings.HasPrefix(target, "/") {
			target = "/run/secrets/" + target
		}
		if target == path {
			return ref.Source
		}
	}
	t.Errorf("%s: no secret mounted at %q", s.Name, path)
	return ""
}

// composeConfigAt is the host file of the config mounted at path in s.
func composeConfigAt(t *testing.T, p *types.Project, s types.ServiceConfig, path string) string {
	t.Helper()
	for _, ref := range s.Configs {
		if ref.Target == path {
			return p.Configs[ref.Source].File
		}
	}
	t.Errorf("%s: no config mounted at %q", s.Name, path)
	return ""
}

func TestComposeSharedStateAndCatalog(t *testing.T) {
	p := composeProject(t)
	for name, c := range p.Configs {
		if c.File == "" || !strings.HasPrefix(composeRel(t, c.File), "cmd/deploy/") {
			t.Errorf("config %s: want a file under cmd/deploy/, have %+v", name, c)
		} else if _, err := os.Stat(c.File); err != nil {
			t.Errorf("config %s: %v", name, err)
		}
	}
	// Workers that do not serve exports hold no dataset or artifact store by design
	// (TestComposeEpisodeWorkerHoldsNoCredentials); every other one shares both.
	var users []types.ServiceConfig
	users = append(users, composeServicesByCommand(p, "serve")...)
	for _, s := range composeServicesByCommand(p, "worker") {
		if slices.Contains(composeWorkerKinds(t, s), "export") {
			users = append(users, s)
		}
	}
	artifacts, datasets := map[string]bool{}, map[string]bool{}
	for _, s := range users {
		a := composeSetting(s, "artifacts")
		artifacts[a] = true
		u, err := url.Parse(a)
		if err != nil || a == "" {
			t.Errorf("%s: artifacts %q", s.Name, a)
			continue
		}
		if u.Scheme == "file" {
			var vol string
			for _, v := range s.Volumes {
				if v.Target == u.Path {
					if v.Type != types.VolumeTypeVolume {
						t.Errorf("%s: %s is a %s mount, want a named volume shared by all", s.Name, u.Path, v.Type)
					}
					vol = v.Source
				}
			}
			if vol == "" {
				t.Errorf("%s: nothing mounted at the artifact store %s", s.Name, u.Path)
			}
			artifacts["volume:"+vol] = true
		}
		d := composeSetting(s, "datasets")
		if d == "" {
			t.Errorf("%s: no dataset catalog", s.Name)
			continue
		}
		file := composeConfigAt(t, p, s, d)
		datasets[file] = true
		if file == "" {
			continue
		}
		cat, err := activities.LoadDatasets(file)
		if err != nil {
			t.Errorf("%s: %v", s.Name, err)
			continue
		}
		// A postgres dataset's password comes from a mounted .pgpass file (worker side).
		for _, ds := range cat {
			if ds.Driver != activities.DriverPostgres || composeSubcommand(s) != "worker" {
				continue
			}
			cfg, err := pgconn.ParseConfig(ds.DSN)
			if err != nil {
				t.Errorf("dataset %s: %v", ds.Name, err)
				continue
			}
			if cfg.Password != "" {
				t.Errorf("dataset %s: the DSN carries a password; use passfile=", ds.Name)
			}
			q, _ := url.Parse(ds.DSN)
			pass := q.Query().Get("passfile")
			sec := composeSecretAt(t, p, s, pass)
			if sec == "" {
				continue
			}
			local := strings.Replace(ds.DSN, url.QueryEscape(pass), url.QueryEscape(p.Secrets[sec].File), 1)
			local = strings.Replace(local, pass, p.Secrets[sec].File, 1)
			cfg, err = pgconn.ParseConfig(local)
			if err != nil || cfg.Password == "" {
				t.Errorf("dataset %s: the .pgpass secret %s has no line for %s@%s:%d/%s (%v)", ds.Name, sec,
					cfg.User, cfg.Host, cfg.Port, cfg.Database, err)
			}
		}
	}
	if len(artifacts) != 2 { // one URL and one volume
		t.Errorf("frontends and workers do not share one artifact store: %v", artifacts)
	}
	if len(datasets) != 1 {
		t.Errorf("frontends and workers do not share one dataset catalog: %v", datasets)
	}
	// Every frontend enforces the same quotas and weights, from a tenants file that parses.
	tenants := map[string]bool{}
	for _, s := range composeServicesByCommand(p, "serve") {
		file := composeConfigAt(t, p, s, composeSetting(s, "tenants"))
		tenants[file] = true
		if file == "" {
			t.Errorf("%s: no tenants file (fairness weights and quotas)", s.Name)
		} else if _, err := authz.LoadTenants(file); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
	}
	if len(tenants) != 1 {
		t.Errorf("frontends do not share one tenants file: %v", tenants)
	}
}

func composeReadDockerfile(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(composeRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// composeStage is one FROM … block of the Dockerfile, continuation lines joined.
type composeStage struct {
	from  string
	lines []string
}

func composeDockerStages(df string) []composeStage {
	df = strings.ReplaceAll(df, "\\\n", " ")
	var stages []composeStage
	for _, line := range strings.Split(df, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, rest, _ := strings.Cut(line, " ")
		if strings.EqualFold(instr, "FROM") {
			f := strings.Fields(rest)
			for len(f) > 0 && strings.HasPrefix(f[0], "--") {
				f = f[1:]
			}
			stages = append(stages, composeStage{from: f[0]})
			continue
		}
		if len(stages) > 0 {
			stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, line)
		}
	}
	return stages
}

func TestComposeDockerfile(t *testing.T) {
	stages := composeDockerStages(composeReadDockerfile(t))
	if len(stages) < 2 {
		t.Fatalf("want a multi-stage build, have %d stage(s)", len(stages))
	}
	for _, s := range stages {
		if s.from != "scratch" && !composeImagePinned(s.from) {
			t.Errorf("FROM %s is not pinned to an exact version or digest", s.from)
		}
	}
	build, final := stages[0], stages[len(stages)-1]
	if !strings.HasPrefix(build.from, "golang:") {
		t.Errorf("build stage FROM %s, want golang", build.from)
	} else {
		gomod, err := os.ReadFile(filepath.Join(composeRoot, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^go ([0-9.]+)$`).FindSubmatch(gomod)
		tag := strings.SplitN(strings.TrimPrefix(build.from, "golang:"), "-", 2)[0]
		if m == nil || version.Compare("go"+tag, "go"+string(m[1])) < 0 {
			t.Errorf("build stage Go %s is older than go.mod's go %s", tag, m[1])
		}
	}
	var cgoOff bool
	for _, l := range build.lines {
		if (strings.HasPrefix(l, "ENV ") || strings.HasPrefix(l, "RUN ")) && strings.Contains(l, "CGO_ENABLED=0") {
			cgoOff = true
		}
	}
	if !cgoOff {
		t.Error("build stage does not set CGO_ENABLED=0")
	}
	if final.from != "scratch" && !strings.HasPrefix(final.from, "gcr.io/distroless/static") {
		t.Errorf("final stage FROM %s, want distroless/static or scratch", final.from)
	}
	var user, entry string
	for _, l := range final.lines {
		instr, rest, _ := strings.Cut(l, " ")
		switch strings.ToUpper(instr) {
		case "USER":
			user = strings.TrimSpace(rest)
		case "ENTRYPOINT":
			entry = rest
		case "RUN":
			t.Errorf("final stage runs %q: it has no shell", rest)
		}
	}
	if u, _, _ := strings.Cut(user, ":"); u == "" || u == "root" || u == "0" {
		if !(user == "" && strings.HasSuffix(final.from, ":nonroot") || strings.Contains(final.from, ":nonroot@")) {
			t.Errorf("final stage USER %q: want a non-root user", user)
		}
	}
	if !strings.Contains(entry, "jobgate") {
		t.Errorf("ENTRYPOINT %s does not run jobgate", entry)
	}
	// That CGO_ENABLED=0 really yields a static binary was checked by hand (ELF without an
	// interpreter); building it here would be a second full build of the module in CI.
}

// composeWorkerKinds is a worker service's --kinds (all kinds when unset), as the worker parses it.
func composeWorkerKinds(t *testing.T, s types.ServiceConfig) []string {
	t.Helper()
	v := composeSetting(s, "kinds")
	if v == "" {
		return workflows.KindNames()
	}
	kinds, err := app.ParseKinds(v)
	if err != nil {
		t.Errorf("%s: %v", s.Name, err)
	}
	return kinds
}

// TestComposeEpisodeWorkerHoldsNoCredentials: eval episodes (command suites run
// caller-influenced code) go to workers holding no secret, dataset catalog, artifact store or
// volume; every suite's task queue is served by such a worker; exports are still served.
func TestComposeEpisodeWorkerHoldsNoCredentials(t *testing.T) {
	p := composeProject(t)
	workers := composeServicesByCommand(p, "worker")
	// Every jobgate service reads the same suite catalog (the frontend records its queues).
	var suitesFile string
	for _, s := range append(composeServicesByCommand(p, "serve"), workers...) {
		f := composeConfigAt(t, p, s, composeSetting(s, "suites"))
		if suitesFile == "" {
			suitesFile = f
		} else if f != suitesFile {
			t.Errorf("%s reads suites %s, others %s", s.Name, f, suitesFile)
		}
	}
	cat, err := activities.LoadCatalog(suitesFile)
	if err != nil {
		t.Fatal(err)
	}
	queueOf := func(s types.ServiceConfig) string {
		if q := composeSetting(s, "task-queue"); q != "" {
			return q
		}
		return "jobgate"
	}
	clean := map[string]bool{} // task queues served with the eval kind by credential-free workers
	exportQueues := map[string]bool{}
	for _, s := range workers {
		kinds := composeWorkerKinds(t, s)
		if slices.Contains(kinds, "export") {
			exportQueues[queueOf(s)] = true
			continue
		}
		if len(s.Secrets) > 0 || len(s.Volumes) > 0 || composeSetting(s, "datasets") != "" || composeSetting(s, "artifacts") != "" {
			t.Errorf("%s serves %v without exports but holds secrets %v, volumes %v, datasets %q or artifacts %q",
				s.Name, kinds, s.Secrets, s.Volumes, composeSetting(s, "datasets"), composeSetting(s, "artifacts"))
			continue
		}
		for k := range s.Environment {
			if strings.HasPrefix(k, "AWS_") || strings.HasPrefix(k, "AZURE_") || strings.HasPrefix(k, "GOOGLE_") || strings.HasPrefix(k, "PG") {
				t.Errorf("%s: %s is a cloud or database credential variable on an episode worker", s.Name, k)
			}
		}
		if slices.Contains(kinds, "eval") {
			clean[queueOf(s)] = true
		}
	}
	if len(clean) == 0 {
		t.Fatal("no worker runs eval episodes without dataset and artifact credentials")
	}
	if !exportQueues["jobgate"] {
		t.Error("no worker serves exports on the default task queue")
	}
	for _, name := range cat.Names() {
		q := cat[name].TaskQueue
		if !clean[q] {
			t.Errorf("suite %s: episodes go to task queue %q, which no credential-free eval worker serves (those serve %v)",
				name, q, slices.Sorted(maps.Keys(clean)))
		}
	}
}

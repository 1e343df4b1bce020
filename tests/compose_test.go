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

	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/tests/support/testenv"
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
		if f := composeSetting(s, "ui-url-for"); f != "" && f != jobcore.UIURLForAdmin && f != jobcore.UIURLForNone {
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

// composeKindWorkers maps each kind to the worker services that serve it on the task queue the
// frontends start jobs on (a worker without --kinds serves every kind, as `jobgate worker`
// does), reading --kinds with the worker's own parser.
func composeKindWorkers(t *testing.T, p *types.Project) map[string][]string {
	t.Helper()
	queues := map[string]bool{}
	for _, s := range composeServicesByCommand(p, "serve") {
		q := composeSetting(s, "task-queue")
		if q == "" {
			q = workflows.TaskQueueDefault
		}
		queues[q] = true
	}
	if len(queues) != 1 {
		t.Fatalf("frontends start jobs on %d task queues, want one: %v", len(queues), slices.Sorted(maps.Keys(queues)))
	}
	out := map[string][]string{}
	for _, s := range composeServicesByCommand(p, "worker") {
		q := composeSetting(s, "task-queue")
		if q == "" {
			q = workflows.TaskQueueDefault
		}
		if !queues[q] {
			continue
		}
		kinds := workflows.DefaultKindNames()
		if v := composeSetting(s, "kinds"); v != "" {
			var err error
			if kinds, err = app.ParseKinds(v); err != nil {
				t.Fatalf("%s: --kinds %q: %v", s.Name, v, err)
			}
		}
		for _, k := range kinds {
			out[k] = append(out[k], s.Name)
		}
	}
	return out
}

// TestComposeWorkersServeEveryKind: the workers on the frontends' task queue together serve
// every kind the workflows layer registers, so a kind added later cannot go without a worker
// in the compose stack (its jobs would sit queued for ever).
func TestComposeWorkersServeEveryKind(t *testing.T) {
	served := composeKindWorkers(t, composeProject(t))
	for _, k := range workflows.DefaultKindNames() {
		if len(served[k]) == 0 {
			t.Errorf("docker-compose.yml: no worker on the frontends' task queue serves kind %q (check each worker's --kinds)", k)
		}
	}
}

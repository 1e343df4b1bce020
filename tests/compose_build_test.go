package tests

// Offline checks of the deployment files (no Docker engine, no network): docker-compose.yml is
// loaded with compose-go the way `docker compose` loads it, the Dockerfile and cmd/deploy/nginx.conf
// are parsed by hand. The jobgate flag sets are the real ones: the binary is built exactly as
// the Dockerfile builds it (CGO_ENABLED=0, -trimpath) and asked `<command> -h`, and that list
// is cross-checked against the Config.Flags of cmd/app, so a renamed or removed flag fails here.

import (
	"go/version"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/workflows"
)

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
		cat, err := contract.LoadDatasets(file)
		if err != nil {
			t.Errorf("%s: %v", s.Name, err)
			continue
		}
		// A postgres dataset's password comes from a mounted .pgpass file (worker side).
		for _, ds := range cat {
			if ds.Driver != contract.DriverPostgres || composeSubcommand(s) != "worker" {
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
		return workflows.DefaultKindNames()
	}
	kinds, err := app.ParseKinds(v)
	if err != nil {
		t.Errorf("%s: %v", s.Name, err)
	}
	return kinds
}

// TestComposeEpisodeWorkerHoldsNoCredentials: eval episodes (command suites run
// caller-influenced code) go to workers holding no secret, dataset catalog, artifact store or
// volume but the payload keys (an episode's input is encrypted: the key-encryption key, and the
// key store read-only; TestComposeProcessesHaveTheirKeys); every suite's task queue is served by
// such a worker; exports are still served.
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
	cat, err := contract.LoadCatalog(suitesFile)
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
		kek, keyVol := composePayloadKeyMounts(t, p, s)
		secrets := slices.DeleteFunc(slices.Clone(s.Secrets), func(r types.ServiceSecretConfig) bool { return r.Source == kek })
		volumes := slices.DeleteFunc(slices.Clone(s.Volumes), func(v types.ServiceVolumeConfig) bool {
			return v.Source == keyVol.Source && v.Target == keyVol.Target && v.ReadOnly
		})
		if len(secrets) > 0 || len(volumes) > 0 || composeSetting(s, "datasets") != "" || composeSetting(s, "artifacts") != "" {
			t.Errorf("%s serves %v without exports but holds secrets %v, volumes %v, datasets %q or artifacts %q (beyond the payload keys, the store read-only)",
				s.Name, kinds, secrets, volumes, composeSetting(s, "datasets"), composeSetting(s, "artifacts"))
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

package tests

// Offline checks of the deployment files (no Docker engine, no network): docker-compose.yml is
// loaded with compose-go the way `docker compose` loads it, the Dockerfile and cmd/deploy/nginx.conf
// are parsed by hand. The jobgate flag sets are the real ones: the binary is built exactly as
// the Dockerfile builds it (CGO_ENABLED=0, -trimpath) and asked `<command> -h`, and that list
// is cross-checked against the Config.Flags of cmd/app, so a renamed or removed flag fails here.

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/workflows"
)

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

// composeFlagEnv are variables whose names look secret but whose values are not: the Web UI's
// TEMPORAL_CODEC_PASS_ACCESS_TOKEN is "true" (pass the signed-in user's token to the codec
// endpoint), JOBGATE_PAYLOAD_KEY_STORE a URL (the keys in it are wrapped).
var composeFlagEnv = map[string]bool{"TEMPORAL_CODEC_PASS_ACCESS_TOKEN": true, "JOBGATE_PAYLOAD_KEY_STORE": true}

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
			} else if composeSecretishEnv.MatchString(k) && !composeFlagEnv[k] {
				t.Errorf("%s: %s looks like a secret passed as an environment value; use a file", name, k)
			}
		}
		if composeIsJobgate(s) {
			for _, a := range s.Command {
				for _, k := range []string{"handle-keys", "resume-keys", "signing-keys", "payload-kek"} {
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

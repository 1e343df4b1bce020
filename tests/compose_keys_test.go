package tests

// Offline checks (as compose_test.go) that every jobgate process of docker-compose.yml gets
// the keys it refuses to start without: serve and worker a payload key-encryption key and key
// store, serve and the export workers the signing keys.

import (
	"context"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/jobgate/jobgate/activities/payloadcrypt"
	"github.com/jobgate/jobgate/cmd/app"
	"github.com/jobgate/jobgate/frontend/handle"
)

// composePayloadKeyMounts is what gives s its payload keys: the secret mounted at its
// --payload-kek-file and the named volume mounted at its file:// --payload-key-store (the mount
// itself, for its read-only flag). Either is "" when missing (an error is reported).
func composePayloadKeyMounts(t *testing.T, p *types.Project, s types.ServiceConfig) (secret string, vol types.ServiceVolumeConfig) {
	t.Helper()
	if composeSetting(s, "payload-kek") != "" {
		t.Errorf("%s: --payload-kek as a value; mount it and use --payload-kek-file (or a KMS URL in production)", s.Name)
	}
	f := composeSetting(s, "payload-kek-file")
	if f == "" {
		t.Errorf("%s: no --payload-kek-file: it would refuse to start", s.Name)
	} else {
		secret = composeSecretAt(t, p, s, f)
	}
	store := composeSetting(s, "payload-key-store")
	if store == "" {
		t.Errorf("%s: no --payload-key-store: every serve and worker must name the one store", s.Name)
		return secret, vol
	}
	u, err := url.Parse(store)
	if err != nil || u.Scheme != "file" {
		t.Errorf("%s: --payload-key-store %q: want a file:// URL on a shared named volume", s.Name, store)
		return secret, vol
	}
	for _, v := range s.Volumes {
		if v.Target == u.Path && v.Type == types.VolumeTypeVolume {
			return secret, v
		}
	}
	t.Errorf("%s: no named volume mounted at the payload key store %s", s.Name, u.Path)
	return secret, vol
}

// TestComposeProcessesHaveTheirKeys: every serve and worker service has the one payload
// key-encryption key (a secret whose content opens a key store) and the one key store (a named
// volume, writable except on workers without exports, which never make a key); serve and every
// worker serving exports have the one signing keyring; and a service given a DEV-ONLY
// placeholder says it is a dev deployment (else it would refuse to start).
func TestComposeProcessesHaveTheirKeys(t *testing.T) {
	p := composeProject(t)
	kekSecrets, stores, volumes, signing := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	var procs []types.ServiceConfig
	for _, cmd := range []string{"serve", "worker"} {
		procs = append(procs, composeServicesByCommand(p, cmd)...)
	}
	if len(procs) == 0 {
		t.Fatal("no serve or worker service")
	}
	for _, s := range procs {
		exports := composeSubcommand(s) == "serve" || slices.Contains(composeWorkerKinds(t, s), "export")
		sec, vol := composePayloadKeyMounts(t, p, s)
		kekSecrets[sec], stores[composeSetting(s, "payload-key-store")], volumes[vol.Source] = true, true, true
		if exports && vol.ReadOnly {
			t.Errorf("%s: the payload key store is mounted read-only, but it makes tenants' keys", s.Name)
		}
		if !exports && vol.Source != "" && !vol.ReadOnly {
			t.Errorf("%s runs episodes only: mount the payload key store read-only (it never makes a key)", s.Name)
		}
		if exports {
			f := composeSetting(s, "signing-keys-file")
			if f == "" {
				t.Errorf("%s: no --signing-keys-file: it would refuse to start", s.Name)
			} else {
				signing[composeSecretAt(t, p, s, f)] = true
			}
		} else if f := composeSetting(s, "signing-keys-file"); f != "" {
			t.Errorf("%s runs caller-influenced episodes and signs nothing: it must not hold the signing keys (%s)", s.Name, f)
		}
		for _, ref := range s.Secrets {
			if sec, ok := p.Secrets[ref.Source]; ok && strings.Contains(sec.File, "DEV-ONLY") && composeSetting(s, "dev-deployment") != "true" {
				t.Errorf("%s: secret %s is a DEV-ONLY placeholder but JOBGATE_DEV_DEPLOYMENT is not true: it would refuse to start", s.Name, ref.Source)
			}
		}
	}
	if len(kekSecrets) != 1 || len(stores) != 1 || len(volumes) != 1 || len(signing) != 1 {
		t.Fatalf("want one payload KEK, key store, key volume and signing keyring for all; have %v, %v, %v, %v",
			kekSecrets, stores, volumes, signing)
	}
	for sec := range kekSecrets {
		if sec == "" {
			continue
		}
		b, err := os.ReadFile(p.Secrets[sec].File)
		if err != nil {
			t.Fatal(err)
		}
		kek := strings.TrimSpace(string(b))
		keys, err := payloadcrypt.Open(context.Background(), kek, "file://"+t.TempDir(), payloadcrypt.Options{})
		if err != nil {
			t.Fatalf("payload KEK secret %s does not open a key store: %v", sec, err)
		}
		_, err = keys.Add(context.Background(), "acme")
		_ = keys.Close()
		if err != nil {
			t.Fatalf("payload KEK secret %s cannot wrap a key: %v", sec, err)
		}
		if !strings.Contains(kek, app.DevOnlyMarker) {
			t.Errorf("payload KEK secret %s: its content lacks the %s marker, so a deployment that kept it would not be refused", sec, app.DevOnlyMarker)
		}
	}
	for sec := range signing {
		b, err := os.ReadFile(p.Secrets[sec].File)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := handle.ParseSigningKeyring(strings.TrimSpace(string(b))); err != nil {
			t.Errorf("signing keys secret %s: %v", sec, err)
		}
	}
}

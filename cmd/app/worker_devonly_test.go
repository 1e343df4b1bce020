package app

import (
	"context"
	"testing"
	"time"

	"github.com/jobgate/jobgate/frontend/handle"
)

// TestWorkerRefusesDevOnlyResumeKeys: the worker is the side that verifies resume seals, so it
// refuses the public DEV-ONLY resume keys (anyone with the repository could seal an approval
// with them) unless --dev-deployment says this is a dev deployment — also when the placeholder
// is only one key of the ring, which still verifies.
func TestWorkerRefusesDevOnlyResumeKeys(t *testing.T) {
	const placeholder = "../deploy/secrets/DEV-ONLY-resume-keys"
	pub, err := readSecretFile(placeholder, "placeholder")
	if err != nil {
		t.Fatal(err)
	}
	own := "prod-1:" + handle.GenerateKeyHex()
	for _, c := range []struct {
		name    string
		cfg     WorkerConfig
		refused string // "" = not refused for DEV-ONLY
	}{
		{"placeholder file", WorkerConfig{ResumeKeysFile: placeholder}, "--resume-keys-file"},
		{"placeholder among own keys", WorkerConfig{ResumeKeys: own + "," + string(pub)}, "--resume-keys"},
		{"placeholder in a dev deployment", WorkerConfig{ResumeKeysFile: placeholder, DevDeployment: true}, ""},
		{"own keys", WorkerConfig{ResumeKeys: own}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Kinds = []string{"eval"}
			// Nothing listens here: a run that gets past the keys fails (or times out) dialing.
			c.cfg.Temporal = withPayloadKEK(t, TemporalConfig{Address: "127.0.0.1:1", Namespace: "default"})
			m := &WorkerMain{Config: c.cfg}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			err := m.Run(ctx)
			_ = m.Close()
			wantDevOnlyRefusal(t, err, c.refused)
			if c.refused != "" && m.ResumeKeys != nil {
				t.Fatal("refused, but the worker kept the keys")
			}
		})
	}
}

package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"
)

// DeploymentNameDefault is the Worker Deployment `jobgate worker` joins unless told otherwise.
const DeploymentNameDefault = "jobgate"

// DeploymentConfig puts a worker in a Temporal Worker Deployment: each build is a version, and
// a pinned job (evals, exports: workflows.Kind.Versioning) runs every workflow task on the build
// it started on, so a release never replays a running job on changed code. The operator moves
// new jobs to a new build with `jobgate deploy set-current` / `ramp` (cmd/app/README.md).
type DeploymentConfig struct {
	// Name of the Worker Deployment. Empty: the worker runs unversioned (dev: one process, no
	// older worker to keep a job on, so pinning would strand every job at the first restart
	// after a code change). Flag default: DeploymentNameDefault.
	Name string
	// BuildID names this build within the deployment. Defaults to DefaultBuildID().
	BuildID string
}

// Flags registers --deployment-name and --build-id.
func (c *DeploymentConfig) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Name, "deployment-name", DeploymentNameDefault, "Temporal Worker Deployment this worker joins; "+
		"empty runs unversioned (jobs then replay on whatever build picks them up)")
	fs.StringVar(&c.BuildID, "build-id", "", "this build's ID in the deployment (default: the binary's VCS revision, "+
		"+\"-dirty-<binary hash>\" if modified, else its module version, else \"bin-<binary hash>\")")
}

// resolve fills the default build ID and checks both names.
func (c DeploymentConfig) resolve() (DeploymentConfig, error) {
	if c.Name == "" {
		return c, nil
	}
	if c.BuildID == "" {
		c.BuildID = DefaultBuildID()
	}
	if err := checkDeploymentNames(c.Name, c.BuildID); err != nil {
		return c, err
	}
	return c, nil
}

func checkDeploymentNames(name, buildID string) error {
	// The server joins them as "<name>:<build-id>" and reserves "." in deployment names.
	switch {
	case strings.ContainsAny(name, ".:") || strings.TrimSpace(name) != name || len(name) > 255:
		return fmt.Errorf("deployment-name %q: no '.', ':' or surrounding spaces, at most 255 bytes", name)
	case buildID == "" || strings.ContainsAny(buildID, ":") || strings.TrimSpace(buildID) != buildID || len(buildID) > 255:
		return fmt.Errorf("build-id %q: non-empty, no ':' or surrounding spaces, at most 255 bytes", buildID)
	}
	return nil
}

// DefaultBuildID is the build ID of this binary: the VCS revision `go build` stamps (with
// "-dirty-" and a hash of the binary when the tree was modified: two dirty builds of one
// revision are different code), else the module version (`go install …@v1.2.3`), else
// "bin-" and a hash of the binary (`go run`, `go test`: no VCS stamp; the same code builds the
// same bytes, so a rerun keeps its ID and a changed build gets a new one). "unknown" only
// when the executable cannot be read.
func DefaultBuildID() string {
	info, ok := debug.ReadBuildInfo()
	var rev string
	var dirty bool
	if ok {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	switch {
	case rev != "" && !dirty:
		return rev
	case rev != "":
		return rev + "-dirty-" + executableHash()
	case ok && info.Main.Version != "" && info.Main.Version != "(devel)":
		return info.Main.Version
	}
	return "bin-" + executableHash()
}

func executableHash() string {
	p, err := os.Executable()
	if err != nil {
		return "unknown"
	}
	f, err := os.Open(p)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "unknown"
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// deploymentOptions are the worker's versioning options: none when unversioned.
func (c DeploymentConfig) deploymentOptions() worker.DeploymentOptions {
	if c.Name == "" {
		return worker.DeploymentOptions{}
	}
	// No DefaultVersioningBehavior: every workflow declares its own (workflows.Kind.Versioning),
	// and the SDK refuses to register one that does not.
	return worker.DeploymentOptions{UseVersioning: true,
		Version: worker.WorkerDeploymentVersion{DeploymentName: c.Name, BuildID: c.BuildID}}
}

// bootstrapWait bounds how long a worker tries to make itself current in a new deployment.
const bootstrapWait = 30 * time.Second

// bootstrapCurrent makes this worker's version current when the deployment has no current and
// no ramping version: the first rollout, when no versioned job exists that could be moved. It
// never changes a deployment that has one (the operator rolls versions: jobgate deploy). Without
// it, new jobs would wait for an unversioned worker that no longer exists.
func bootstrapCurrent(ctx context.Context, c client.Client, d DeploymentConfig, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(ctx, bootstrapWait)
	defer cancel()
	h := c.WorkerDeploymentClient().GetHandle(d.Name)
	var last error
	for {
		desc, err := h.Describe(ctx, client.WorkerDeploymentDescribeOptions{})
		if err == nil {
			rc := desc.Info.RoutingConfig
			switch {
			case rc.CurrentVersion != nil && rc.CurrentVersion.BuildID == d.BuildID:
				log.Info("this worker's version is current", zap.String("deployment", d.Name), zap.String("build_id", d.BuildID))
				return
			case rc.CurrentVersion != nil || rc.RampingVersion != nil:
				log.Warn("this worker's version gets no new jobs until it is made current: jobgate deploy set-current "+d.BuildID,
					zap.String("deployment", d.Name), zap.String("build_id", d.BuildID), zap.String("current", versionString(rc.CurrentVersion)),
					zap.String("ramping", versionString(rc.RampingVersion)))
				return
			}
			// The conflict token makes a concurrent change (another worker's bootstrap, an
			// operator) win: this call then fails and the next Describe sees the change.
			_, err = h.SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: d.BuildID,
				ConflictToken: desc.ConflictToken})
			if err == nil {
				log.Info("first version of the deployment: made this worker's version current",
					zap.String("deployment", d.Name), zap.String("build_id", d.BuildID))
				return
			}
		}
		// Not found until this worker's first poll registers the version; no pollers seen yet.
		last = err
		select {
		case <-ctx.Done():
			log.Warn("could not make this worker's version current; run jobgate deploy set-current "+d.BuildID,
				zap.String("deployment", d.Name), zap.Error(last))
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func versionString(v *worker.WorkerDeploymentVersion) string {
	if v == nil {
		return "unversioned"
	}
	return v.BuildID
}

// isNotFound reports a deployment or version the server does not know.
func isNotFound(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}

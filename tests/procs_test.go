package tests

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jobgate/jobgate/tests/support/testenv"
)

// goTarget is a main package the process tests build and run: a path in this module, or one
// of a dependency such as the Temporal server module's own temporal-sql-tool.
// tags are build tags (go build -tags).
type goTarget struct{ pkg, name, tags string }

var (
	jobgateTarget = goTarget{"../cmd/jobgate", "jobgate", ""}
	// jobgateBreakingTarget is a release that changed workflow code without a version gate
	// (workflows/breaking_on.go): the replay and deploy tests' incompatible build.
	jobgateBreakingTarget = goTarget{"../cmd/jobgate", "jobgate-breaking", "jobgate_breaking_change"}
	// lbproxyTarget is the round-robin proxy process of the cluster tests.
	lbproxyTarget = goTarget{"./lbproxy", "lbproxy", ""}
)

// goBuild is one target's build: done once per test process, whichever test asks first;
// tests asking for the same target meanwhile wait for it, tests asking for others do not.
type goBuild struct {
	once sync.Once
	path string
	err  error
}

var goBuilds sync.Map // goTarget → *goBuild

// buildGo builds the targets concurrently, each at most once per test process, and returns
// their binaries in order. A test that runs binaries is heavy: -short skips it (testenv.Heavy).
func buildGo(t testing.TB, targets ...goTarget) []string {
	t.Helper()
	testenv.Heavy(t, "builds and runs Go binaries")
	var wg sync.WaitGroup
	builds := make([]*goBuild, len(targets))
	for i, tg := range targets {
		v, _ := goBuilds.LoadOrStore(tg, &goBuild{})
		builds[i] = v.(*goBuild)
		wg.Go(func() { builds[i].once.Do(func() { builds[i].path, builds[i].err = tg.build() }) })
	}
	wg.Wait()
	paths := make([]string, len(targets))
	for i, b := range builds {
		if b.err != nil {
			t.Fatal(b.err)
		}
		paths[i] = b.path
	}
	return paths
}

func (tg goTarget) build() (string, error) {
	dir, err := os.MkdirTemp("", "jobgate-"+tg.name+"-")
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, tg.name)
	args := []string{"build", "-o", p}
	if tg.tags != "" {
		args = append(args, "-tags", tg.tags)
	}
	if out, err := exec.Command("go", append(args, tg.pkg)...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", tg.pkg, err, out)
	}
	return p, nil
}

// removeGoBuilds deletes the binaries buildGo made (TestMain, once every test has ended): each
// test process built its own jobgate (~230 MB) into a temporary directory and left it there, and
// a day of runs filled this machine's disk.
func removeGoBuilds() {
	goBuilds.Range(func(_, v any) bool {
		if b := v.(*goBuild); b.path != "" {
			_ = os.RemoveAll(filepath.Dir(b.path))
		}
		return true
	})
}

// jobgateBinary is the real jobgate binary.
func jobgateBinary(t testing.TB) string { return buildGo(t, jobgateTarget)[0] }

// lbproxyBinary is the round-robin proxy of the cluster tests.
func lbproxyBinary(t testing.TB) string { return buildGo(t, lbproxyTarget)[0] }

// proc is a process a test started: its stderr (and stdout, if asked) collected, SIGKILLed
// when the test ends.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	out  strings.Builder
}

// startProc starts cmd, collecting its stderr, and its stdout too when withStdout (otherwise
// stdout goes where cmd.Stdout says).
func startProc(t testing.TB, cmd *exec.Cmd, withStdout bool) *proc {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	must(t, err)
	if withStdout {
		cmd.Stdout = cmd.Stderr
	}
	must(t, cmd.Start())
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.kill(t) })
	return p
}

// spawn runs the jobgate binary with the bundle's environment (the package's Temporal, the
// bundle's task queue, datasets, artifacts and resume keys).
func (b *testBundle) spawn(t *testing.T, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(jobgateBinary(t), args...)
	cmd.Env = append(os.Environ(), "JOBGATE_TEMPORAL_ADDRESS="+temporalAddr, "JOBGATE_TASK_QUEUE="+b.taskQueue, "JOBGATE_NAMESPACE="+namespace,
		"JOBGATE_DATASETS="+b.datasets, "JOBGATE_ARTIFACTS="+b.artifacts, "JOBGATE_RESUME_KEYS="+b.resumeKeySpec,
		"JOBGATE_SIGNING_KEYS="+b.signingKeySpec)
	cmd.Env = append(cmd.Env, b.payloadEnv()...)
	return startProc(t, cmd, false)
}

func (p *proc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// kill sends SIGKILL: no shutdown hook, no drain, exactly like a node dying.
func (p *proc) kill(t testing.TB) {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Errorf("process %d did not die", p.cmd.Process.Pid)
	}
}

// npmCI installs the locked dependencies of the Node.js project in tests/<dir>.
func npmCI(t *testing.T, npm, dir string, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in tests/%s: %v\n%s", dir, err, out)
	}
}

package tests

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/tests/support/testenv"
	"github.com/jobgate/jobgate/workflows"
)

// findManifest is the path of the manifest.json in b's artifact store whose decision record
// names job id.
func findManifest(t *testing.T, b *testBundle, id string) string {
	t.Helper()
	return findManifestIn(t, strings.TrimPrefix(b.artifacts, "file://"), id)
}

// findManifestIn is the path of the manifest.json under the artifact directory root whose
// decision record names job id.
func findManifestIn(t *testing.T, root, id string) string {
	t.Helper()
	found := ""
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "manifest.json" {
			return nil
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		var m struct {
			Decision *struct {
				WorkflowID string `json:"workflow_id"`
			} `json:"decision"`
		}
		if json.Unmarshal(raw, &m) == nil && m.Decision != nil && m.Decision.WorkflowID == id {
			found = p
		}
		return nil
	})
	if found == "" {
		t.Fatalf("no manifest.json with the decision record of %s under %s", id, root)
	}
	return found
}

// runVerify runs the built `jobgate verify` and returns its exit code and stdout.
func runVerify(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, jobgateBinary(t), append([]string{"verify"}, args...)...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String()
	case err != nil:
		t.Fatalf("jobgate verify: %v\n%s", err, errb.String())
	}
	return 0, out.String()
}

// TestDecisionRecordEverySurface: an export approved through each surface — resume_export
// (with a token that names the person), an MRTR answer, tasks/update, and `jobgate approvals`
// — runs, and its manifest.json holds a decision record with that surface that the built
// `jobgate verify` checks against its Ed25519 signature with the public keys alone (from
// serve's /.well-known/jobgate-signing-keys) and against the artifact next to it; get_export shows the record; a flipped byte in a copy of the manifest fails verify
// with exit 1 and one FAIL line.
func TestDecisionRecordEverySurface(t *testing.T) {
	testenv.Heavy(t, "runs the jobgate CLI binary")
	t.Parallel()
	b := setup(t, setupOpts{datasetsJSON: catalogJSON(t, demoDataset(demoDB(t), nil))})
	jobgateBinary(t) // build while the exports start
	csAna := b.session(ana, 0, "")
	start := func(name string) *jobcore.JobView {
		v := mustView(t, exStart(t, csAna, uniqueKey(t)+"-"+name, "csv", []string{"id", "email"}))
		return exWait(t, csAna, v.Handle, workflows.StatusAwaitingInput, 30*time.Second)
	}
	vTool, vMRTR, vCLI := start("tool"), start("mrtr"), start("cli")
	tk := b.tkStart(t, 0, ana, "start_export", map[string]any{"idempotency_key": uniqueKey(t) + "-tasks", "dataset": "customers",
		"format": "csv", "columns": []string{"id", "email"}, "purpose": "quarterly churn analysis"})

	// Tool: the steward's token says who she is and how she signed in.
	authAt := time.Now().Add(-3 * time.Minute).Truncate(time.Second)
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"iss": testIssuer, "aud": b.resource(),
		"sub": steward.sub, "tenant": "acme", "scope": "jobs:approve", "iat": time.Now().Unix(),
		"exp": time.Now().Add(time.Hour).Unix(), "name": "Stew Ard", "email": "steward@acme.example",
		"auth_time": authAt.Unix(), "amr": []string{"pwd", "otp"}, "acr": "urn:acme:loa:2"}).SignedString(b.secret)
	must(t, err)
	c := mcp.NewClient(&mcp.Implementation{Name: "record-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	csTool, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: b.url(1), DisableStandaloneSSE: true,
		HTTPClient: &http.Client{Transport: bearerRT{token: tok, base: http.DefaultTransport}, Timeout: 30 * time.Second}}, nil)
	must(t, err)
	t.Cleanup(func() { _ = csTool.Close() })
	mustView(t, exResume(t, csTool, vTool, workflows.DecisionApprove))

	// MRTR: get_export asks the steward's 2026 client; the retry answers.
	ms := b.mrtrSession(steward, 1, neverCalled, true)
	args := map[string]any{"handle": vMRTR.Handle}
	asked := rawCall(t, ms, &mcp.CallToolParams{Name: "get_export", Arguments: args})
	if !asked.NeedsInput() || asked.RequestState == "" {
		t.Fatalf("MRTR: want an elicitation, got %+v", asked)
	}
	o := parseOutcome(t, "get_export", rawCall(t, ms, &mcp.CallToolParams{Name: "get_export", Arguments: args,
		RequestState: asked.RequestState, InputResponses: mcp.InputResponseMap{jobcore.InputKeyApproval: &mcp.ElicitResult{
			Action: "accept", Content: map[string]any{"decision": "approve", "comment": "mrtr ok"}}}}))
	if o.View == nil || o.View.Status == workflows.StatusAwaitingInput {
		t.Fatalf("MRTR answer: %+v", o)
	}

	// CLI: `jobgate approvals approve` declares itself.
	runCLI(t, b, b.token(steward), "approvals", "approve", vCLI.Handle, "--comment", "cli ok").mustSucceed(t, "approvals approve")

	// Tasks: the steward answers the task's input request.
	var asked2 *tkTask
	eventually(t, 30*time.Second, "the task to ask the steward", func() bool {
		asked2 = b.tkGet(t, 0, steward, tk.TaskID).task(t)
		return asked2.Status == "input_required"
	})
	k, _ := tkInput(t, asked2)
	tkAck(t, b.tkUpdate(t, 1, steward, tk.TaskID, tkAnswer(k, "accept", "approve")))
	_, vTasks, _ := tkResult(t, b.tkWait(t, ana, tk.TaskID, "completed", 60*time.Second))

	keysURL := "http://" + b.frontends[0].Addr() + "/.well-known/jobgate-signing-keys"
	var toolManifest string
	for _, c := range []struct {
		v       *jobcore.JobView
		surface string
	}{{vTool, workflows.SurfaceTool}, {vMRTR, workflows.SurfaceMRTR}, {vCLI, workflows.SurfaceCLI}, {vTasks, workflows.SurfaceTasks}} {
		done := exWait(t, csAna, c.v.Handle, workflows.StatusSucceeded, 60*time.Second)
		d := exResult(t, done).Decision
		if d == nil || d.Surface != c.surface || d.By != "steward" || !d.Sealed || d.Decision != "approve" ||
			!strings.HasPrefix(d.Meaning, "Allow ana@acme to export id and **email** of customers") {
			t.Errorf("%s: get_export decision %+v", c.surface, d)
		}
		mp := findManifest(t, b, done.JobID)
		code, out := runVerify(t, mp, "--keys-url", keysURL)
		t.Logf("jobgate verify (%s):\n%s", c.surface, out)
		if code != 0 || !strings.Contains(out, "ok   decision signature (Ed25519, key s1): approve by steward@acme") ||
			!strings.Contains(out, " via "+c.surface+", scope ") || !strings.Contains(out, "ok   artifact: ") ||
			!strings.Contains(out, "ok   manifest signature: ") || strings.Contains(out, "SKIP") ||
			!strings.Contains(out, "ok   decision scope: approved export of id, email of customers as csv for 'quarterly churn analysis'") ||
			strings.Contains(out, "FAIL") {
			t.Errorf("%s: verify exit %d:\n%s", c.surface, code, out)
		}
		if c.surface == workflows.SurfaceTool {
			toolManifest = mp
			if d.Email != "steward@acme.example" || d.Name != "Stew Ard" || !d.AuthTime.Equal(authAt) ||
				strings.Join(d.AMR, " ") != "pwd otp" || d.ACR != "urn:acme:loa:2" || d.Issuer != testIssuer {
				t.Errorf("tool: the token's person claims are not in the record: %+v", d)
			}
		}
	}

	// jobs get shows the record.
	g := runCLI(t, b, b.token(ana), "jobs", "get", vCLI.Handle)
	g.mustSucceed(t, "jobs get")
	for _, want := range []string{"decision:", "approve by steward", "via cli", "meaning shown:", "comment:", "cli ok", "jobgate verify"} {
		if !strings.Contains(g.stdout, want) {
			t.Errorf("jobs get lacks %q:\n%s", want, g.stdout)
		}
	}

	// A flipped byte in (a copy of) the manifest: exit 1, the manifest signature and the
	// record's check fail.
	raw, err := os.ReadFile(toolManifest)
	must(t, err)
	var shown struct {
		Decision json.RawMessage `json:"decision"`
	}
	must(t, json.Unmarshal(raw, &shown))
	t.Logf("the decision record in manifest.json (tool):\n%s", shown.Decision)
	i := strings.Index(string(raw), `"email":"steward@acme.example"`)
	if i < 0 {
		t.Fatalf("the manifest's record has no email:\n%s", raw)
	}
	raw[i+len(`"email":"s`)] ^= 0x01 // steward -> ttewar…: one bit of one byte
	flipped := filepath.Join(t.TempDir(), "manifest.json")
	must(t, os.WriteFile(flipped, raw, 0o644))
	code, out := runVerify(t, flipped, "--keys-url", keysURL, "--artifact", filepath.Dir(toolManifest))
	t.Logf("jobgate verify (flipped byte):\n%s", out)
	if code != 1 || strings.Count(out, "FAIL") != 2 || !strings.Contains(out, "FAIL decision signature: the record's email does not match what was signed") ||
		!strings.Contains(out, "FAIL manifest signature: does not verify") {
		t.Errorf("flipped byte: exit %d, want 1 with two FAIL lines:\n%s", code, out)
	}
	// A flipped byte of the artifact's sha256, with no artifact next to the copy: the worker's
	// manifest signature fails it (the digest itself cannot be checked: SKIP).
	raw[i+len(`"email":"s`)] ^= 0x01 // back
	j := strings.Index(string(raw), `"sha256":"`) + len(`"sha256":"`)
	raw[j] ^= 0x01
	must(t, os.WriteFile(flipped, raw, 0o644))
	code, out = runVerify(t, flipped, "--keys-url", keysURL)
	t.Logf("jobgate verify (flipped sha256, no artifact):\n%s", out)
	if code != 1 || strings.Count(out, "FAIL") != 1 || !strings.Contains(out, "FAIL manifest signature: does not verify") ||
		!strings.Contains(out, "SKIP artifact: not next to the manifest") {
		t.Errorf("flipped sha256: exit %d, want 1 with the manifest seal failed:\n%s", code, out)
	}
}

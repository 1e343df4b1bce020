package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/frontend/handle"
)

const verifySummary = `Checks an export's manifest.json as an auditor holding only the artifact, its manifest and the
deployment's PUBLIC signing keys (no secret):
  - the public keys: --keys-file (a JWK set), --keys-url (e.g. https://jobgate.example/.well-known/jobgate-signing-keys),
    else signing-keys.json beside the manifest (written there by the worker: as trustworthy as the
    store it came from, so compare its thumbprints with the deployment's published set, or pin);
  - the manifest signature: the worker signs the whole manifest with Ed25519 (the artifact's and each
    part's SHA-256, the decision record with its signature, the scope, approval_required, the
    version), so nothing in it can be changed, added or removed without the private key. A manifest
    without a valid signature FAILS; a legacy one (made before signatures: HMAC-sealed with the resume
    keys, or unsealed) is checked only with --allow-legacy, and one that carries an approval (or says
    it is signed) never passes unsigned;
  - the decision record's signature: the frontend signs every field of the answer (job, run,
    input_id, scope_digest, tenant, subject, scopes, decision, comment, surface, sign-in, issuer,
    name, email, auth_time, amr, acr, meaning, an expiry minutes after the decision) with Ed25519;
    the record's "at" is the worker's (bound by the manifest signature) and must be before that
    expiry. A record with only the legacy HMAC seal needs --allow-legacy and --resume-keys-file;
  - a missing decision record fails (--allow-unapproved accepts one when the manifest does not say
    approval was required);
  - the record names the job whose artifact the manifest describes, and the approved scope the
    manifest carries (dataset, columns, format, purpose, config digest) has the signed scope_digest
    and the artifact's columns and format;
  - the artifact's size and SHA-256, and each part's, when the artifact file is next to the
    manifest (its object name or file_name) or given with --artifact.
One line per check (ok, FAIL, or SKIP for a check that could not run); exit 0 when all pass,
1 when any fails, 2 for usage errors, 3 when none failed but some were skipped (0 with
--allow-skipped; a missing or invalid signature is never a SKIP).`

// maxManifestBytes bounds the manifest read: real ones are a few KB plus the parts.
const maxManifestBytes = 16 << 20

// verifyReport prints the checks' lines and remembers whether any failed.
type verifyReport struct {
	w       io.Writer
	failed  bool
	skipped bool
}

func (r *verifyReport) ok(format string, args ...any) {
	fmt.Fprintf(r.w, "ok   "+format+"\n", args...)
}

// skip reports a check that could not be run (a missing artifact, a manifest written before
// a field existed): never "ok", and a distinct exit code (3) unless --allow-skipped. Nothing
// that protects the manifest (its signature) is ever a skip: --allow-skipped must not turn a
// stripped signature into a pass (issue 31, finding 7).
func (r *verifyReport) skip(format string, args ...any) {
	r.skipped = true
	fmt.Fprintf(r.w, "SKIP "+format+"\n", args...)
}

func (r *verifyReport) fail(format string, args ...any) {
	r.failed = true
	fmt.Fprintf(r.w, "FAIL "+format+"\n", args...)
}

// verifyOpts are verify's inputs beyond the manifest.
type verifyOpts struct {
	keys            *handle.PublicKeys // nil: none found
	keysFrom        string             // where keys came from, for the report
	resumeKeys      *handle.Keyring    // legacy HMAC seals only
	artifact        string
	allowUnapproved bool
	allowLegacy     bool
}

// runVerify implements "jobgate verify <manifest.json> [--keys-file F | --keys-url U] [--artifact P]".
func runVerify(args []string, stdout, stderr io.Writer) error {
	var keysFile, keysURL, resumeKeysFile string
	var o verifyOpts
	fs := newFlagSet("verify <manifest.json>", verifySummary, stderr)
	fs.StringVar(&keysFile, "keys-file", "", "JWK set of the deployment's public signing keys (as served at /.well-known/jobgate-signing-keys)")
	fs.StringVar(&keysURL, "keys-url", "", "URL of the deployment's public signing keys, e.g. https://jobgate.example/.well-known/jobgate-signing-keys")
	fs.StringVar(&resumeKeysFile, "resume-keys-file", os.Getenv("JOBGATE_RESUME_KEYS_FILE"),
		"legacy only (with --allow-legacy): file holding the deployment's resume keys \"kid:hex,...\", which check HMAC seals of manifests and records made before signatures (env JOBGATE_RESUME_KEYS_FILE)")
	fs.StringVar(&o.artifact, "artifact", "", "the artifact file, or a directory holding it (default: the manifest's directory)")
	var allowSkipped bool
	fs.BoolVar(&o.allowUnapproved, "allow-unapproved", false, "accept a manifest with no decision record when it does not say approval was required (default false: no record fails)")
	fs.BoolVar(&allowSkipped, "allow-skipped", false, "exit 0 when every check that ran passed but some were skipped (default false: exit 3); never accepts a missing signature")
	fs.BoolVar(&o.allowLegacy, "allow-legacy", false, "accept a manifest or record made before Ed25519 signatures: HMAC-sealed (checked with --resume-keys-file; anyone holding those keys could have made the seal) or, for a manifest with no approval, unsealed (default false: they fail)")
	pos, err := parseInterspersed(fs, args) // "verify m.json --artifact x" as the usage shows it
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return errors.New("verify: want exactly one manifest.json")
	}
	if keysFile != "" && keysURL != "" {
		return errors.New("verify: give --keys-file or --keys-url, not both")
	}
	if o.keys, o.keysFrom, err = loadPublicKeys(keysFile, keysURL, filepath.Dir(pos[0])); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if resumeKeysFile != "" {
		b, err := os.ReadFile(resumeKeysFile)
		if err != nil {
			return fmt.Errorf("verify: --resume-keys-file: %w", err)
		}
		if o.resumeKeys, err = handle.ParseKeyring(strings.TrimSpace(string(b))); err != nil {
			return fmt.Errorf("verify: --resume-keys-file %s: %w", resumeKeysFile, err)
		}
	}
	rep := &verifyReport{w: stdout}
	verifyManifestFile(rep, pos[0], o)
	if rep.failed {
		return &exitError{code: 1, err: errors.New("verify: a check failed")}
	}
	if rep.skipped && !allowSkipped {
		return &exitError{code: 3, err: errors.New("verify: no check failed, but some were skipped (SKIP lines; --allow-skipped to accept)")}
	}
	return nil
}

func verifyManifestFile(rep *verifyReport, manifestPath string, o verifyOpts) {
	f, err := os.Open(manifestPath)
	if err != nil {
		rep.fail("manifest: %v", err)
		return
	}
	b, err := io.ReadAll(io.LimitReader(f, maxManifestBytes+1))
	_ = f.Close()
	if err == nil && len(b) > maxManifestBytes {
		err = fmt.Errorf("larger than %d bytes", maxManifestBytes)
	}
	var m contract.Manifest
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(b))
		err = dec.Decode(&m)
		if err == nil && dec.More() {
			err = errors.New("trailing data after the JSON object")
		}
	}
	if err != nil {
		rep.fail("manifest: %s is not a jobgate export manifest: %v", manifestPath, err)
		return
	}
	rep.ok("manifest: %s parsed (%d bytes, %d parts)", manifestPath, m.Bytes, len(m.Parts))
	reportKeys(rep, o)
	verifyManifestSignature(rep, &m, b, o)
	verifyDecisionRecord(rep, &m, o)
	verifyArtifact(rep, &m, manifestPath, o.artifact)
}

// verifyDecisionRecord checks the record against its signature (or, legacy, its HMAC seal)
// and the manifest's job.
func verifyDecisionRecord(rep *verifyReport, m *contract.Manifest, o verifyOpts) {
	d := m.Decision
	switch {
	case d == nil && m.ApprovalRequired:
		rep.fail("decision: the export required approval and the manifest carries no decision record")
		return
	case d == nil && !o.allowUnapproved:
		rep.fail("decision: none recorded (pass --allow-unapproved for an export that never needed one)")
		return
	case d == nil:
		rep.ok("decision: none recorded and the manifest does not say approval was required (accepted: --allow-unapproved)")
		return
	}
	s, label, ok := openRecord(rep, d, o)
	if !ok {
		return
	}
	who := clean(d.By) + "@" + clean(d.Tenant)
	if d.Email != "" {
		who += " <" + clean(d.Email) + ">"
	}
	rep.ok("%s: %s by %s via %s, scope %s, valid until %s", label, clean(d.Decision), who, clean(d.Surface),
		clean(d.ScopeDigest), s.Expiry.UTC().Format(time.RFC3339))
	// The record's "at" is written by the worker when the workflow accepted the answer; the
	// decision's signature does not bind it (its expiry bounds when the answer was made; the
	// manifest signature binds the whole record). Say so.
	if d.At.After(s.Expiry) {
		rep.fail("decision time: recorded at %s, after the decision's signature expired (%s)", d.At.UTC().Format(time.RFC3339), s.Expiry.UTC().Format(time.RFC3339))
		return
	}
	rep.ok("decision time: recorded at %s by the worker (not bound by the decision's own signature, which expires %s)",
		d.At.UTC().Format(time.RFC3339), s.Expiry.UTC().Format(time.RFC3339))
	// The signature names the job; the manifest's object key does too (ExportPrefix: run-scoped
	// "exports/runs/<first run>/<job>/", or the legacy "exports/<job>/").
	prefix := "exports/" + url.PathEscape(d.WorkflowID) + "/"
	if m.RunID != "" {
		prefix = "exports/runs/" + url.PathEscape(m.RunID) + "/" + url.PathEscape(d.WorkflowID) + "/"
	}
	if d.WorkflowID == "" || !strings.HasPrefix(m.Object, prefix) {
		rep.fail("decision job: the record is for job %s, the manifest's artifact is %s", clean(d.WorkflowID), clean(m.Object))
		return
	}
	rep.ok("decision job: the record and the artifact are of job %s", clean(d.WorkflowID))
	verifyScopeOf(rep, m)
}

// verifyScopeOf checks the approved scope the manifest carries (manifests written since it
// existed): its digest is the sealed scope_digest, and the artifact's columns and format are
// the approved ones.
func verifyScopeOf(rep *verifyReport, m *contract.Manifest) {
	sc := m.Scope
	if sc == nil {
		rep.skip("decision scope: the manifest does not carry the approved scope (written before it did): the artifact's columns and format were not checked against what was approved")
		return
	}
	digest, err := contract.JSONDigest(sc)
	if err != nil {
		rep.fail("decision scope: %v", err)
		return
	}
	switch {
	case digest != m.Decision.ScopeDigest:
		rep.fail("decision scope: the manifest's scope does not have the signed scope_digest")
	case sc.Tenant != m.Decision.Tenant:
		rep.fail("decision scope: the scope's tenant is not the record's")
	case !slices.Equal(sc.Columns, m.Columns) || sc.Format != m.Format:
		rep.fail("decision scope: the artifact's columns or format are not the approved ones")
	default:
		rep.ok("decision scope: approved export of %s of %s as %s for '%s' is the artifact's (digest matches)",
			clean(strings.Join(sc.Columns, ", ")), clean(sc.Dataset), clean(sc.Format), clean(sc.Purpose))
	}
}

// sealMismatch names the first field where the record differs from its seal ("" if none).
func sealMismatch(s handle.Resume, d *contract.DecisionRecord) string {
	authTime := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.Unix()
	}
	meaning := ""
	if d.Prompt != "" {
		meaning = hexSHA256(d.Prompt)
	}
	scopes := d.Scopes
	if scopes == nil {
		scopes = []string{}
	}
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"workflow_id", s.WorkflowID == d.WorkflowID}, {"run_id", s.RunID == d.RunID}, {"input_id", s.InputID == d.InputID},
		{"scope_digest", s.ScopeDigest == d.ScopeDigest}, {"tenant", s.Tenant == d.Tenant}, {"by", s.Subject == d.By},
		{"scopes", slices.Equal(s.Scopes, scopes)}, {"decision", s.Decision == d.Decision},
		{"comment", s.CommentDigest == hexSHA256(d.Comment)}, {"surface", s.Surface == d.Surface},
		{"signed_in_with", s.SignedInWith == d.SignedInWith}, {"issuer", s.Issuer == d.Issuer}, {"name", s.Name == d.Name},
		{"email", s.Email == d.Email}, {"auth_time", authTime(s.AuthTime) == authTime(d.AuthTime)},
		{"amr", slices.Equal(s.AMR, d.AMR)}, {"acr", s.ACR == d.ACR}, {"prompt (meaning)", s.MeaningDigest == meaning},
	} {
		if !c.ok {
			return c.name
		}
	}
	return ""
}

func hexSHA256(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// sealKID is the key ID of a seal "jgr1.<kid>.<payload>.<mac>", for the report.
func sealKID(seal string) string {
	parts := strings.Split(seal, ".")
	if len(parts) < 2 {
		return "?"
	}
	return clean(parts[1])
}

// verifyArtifact checks the artifact's size and digests against the manifest when the file
// can be found: --artifact (a file, or a directory to look in), else the manifest's directory,
// under the object's base name or the manifest's file_name.
func verifyArtifact(rep *verifyReport, m *contract.Manifest, manifestPath, artifact string) {
	dir := filepath.Dir(manifestPath)
	if artifact != "" {
		if st, err := os.Stat(artifact); err == nil && !st.IsDir() {
			checkArtifactFile(rep, m, artifact)
			return
		}
		dir = artifact
	}
	var names []string
	for _, n := range []string{path.Base(m.Object), m.FileName} {
		// Names from the manifest: a base name only, never a path out of the directory.
		if n != "" && n != "." && n != "/" && n == filepath.Base(n) && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	for _, n := range names {
		p := filepath.Join(dir, n)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			checkArtifactFile(rep, m, p)
			return
		}
	}
	if artifact != "" {
		rep.fail("artifact: not found in %s (looked for %s)", artifact, strings.Join(names, ", "))
		return
	}
	rep.skip("artifact: not next to the manifest (looked for %s); its size and digests were not checked (use --artifact)", strings.Join(names, ", "))
}

func checkArtifactFile(rep *verifyReport, m *contract.Manifest, p string) {
	f, err := os.Open(p)
	if err != nil {
		rep.fail("artifact: %v", err)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		rep.fail("artifact: %v", err)
		return
	}
	if st.Size() != m.Bytes {
		rep.fail("artifact: %s holds %d bytes, the manifest says %d", p, st.Size(), m.Bytes)
		return
	}
	// The parts are the artifact's last bytes, in order, after a lead (the CSV header's gzip
	// member, or an empty member for an export with no rows).
	var partsBytes int64
	for _, pt := range m.Parts {
		if pt.Bytes < 0 {
			rep.fail("artifact: part %d has a negative size in the manifest", pt.Part)
			return
		}
		partsBytes += pt.Bytes
	}
	lead := m.Bytes - partsBytes
	if lead < 0 {
		rep.fail("artifact: the manifest's parts hold %d bytes, more than the artifact's %d", partsBytes, m.Bytes)
		return
	}
	whole := sha256.New()
	if _, err := io.CopyN(whole, f, lead); err != nil {
		rep.fail("artifact: %v", err)
		return
	}
	bad := []string{}
	for _, pt := range m.Parts {
		h := sha256.New()
		if _, err := io.CopyN(io.MultiWriter(whole, h), f, pt.Bytes); err != nil {
			rep.fail("artifact: %v", err)
			return
		}
		if hex.EncodeToString(h.Sum(nil)) != pt.SHA256 {
			bad = append(bad, fmt.Sprint(pt.Part))
		}
	}
	switch { // the parts first: they say where a change is
	case len(bad) > 0:
		rep.fail("artifact: part(s) %s of %s do not have the manifest's SHA-256", strings.Join(bad, ", "), p)
	case hex.EncodeToString(whole.Sum(nil)) != m.SHA256:
		rep.fail("artifact: %s does not have the manifest's SHA-256", p)
	default:
		rep.ok("artifact: %s matches the manifest (%d bytes, SHA-256 %s, %d parts)", p, m.Bytes, m.SHA256, len(m.Parts))
	}
}

package main

// verify's signature checks: the public keys an auditor brings (or finds beside the manifest),
// the worker's manifest signature and the frontend's decision signature, and the legacy HMAC
// seals of manifests and records made before signatures, accepted only when asked for.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/frontend/handle"
)

// keysFetchTimeout bounds the fetch of --keys-url.
const keysFetchTimeout = 15 * time.Second

// loadPublicKeys reads the public keys from --keys-file or --keys-url, else from the keys file
// beside the manifest (nil, "" when there is none: the signature checks then fail, saying so).
func loadPublicKeys(file, rawURL, manifestDir string) (*handle.PublicKeys, string, error) {
	switch {
	case file != "":
		b, err := readCapped(file)
		if err != nil {
			return nil, "", fmt.Errorf("--keys-file: %w", err)
		}
		k, err := handle.ParseJWKS(b)
		if err != nil {
			return nil, "", fmt.Errorf("--keys-file %s: %w", file, err)
		}
		return k, "--keys-file " + file, nil
	case rawURL != "":
		k, err := fetchPublicKeys(rawURL)
		if err != nil {
			return nil, "", fmt.Errorf("--keys-url: %w", err)
		}
		return k, "--keys-url " + rawURL, nil
	}
	p := filepath.Join(manifestDir, contract.SigningKeysObject)
	b, err := readCapped(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	k, err := handle.ParseJWKS(b)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", p, err)
	}
	return k, p + " (beside the manifest)", nil
}

func readCapped(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, handle.MaxJWKSBytes+1))
}

// fetchPublicKeys GETs a JWK set over http(s), bounded in time and size.
func fetchPublicKeys(rawURL string) (*handle.PublicKeys, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, errors.New("want an absolute http(s) URL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), keysFetchTimeout)
	defer cancel()
	resp, err := getAccepting(ctx, http.DefaultClient, u.String(), "application/jwk-set+json, application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", u.Redacted(), resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, handle.MaxJWKSBytes+1))
	if err != nil {
		return nil, err
	}
	return handle.ParseJWKS(b)
}

// reportKeys says which public keys the checks use and where they came from, with their
// RFC 7638 thumbprints: keys found beside the manifest are as trustworthy as the store they
// came from, so the auditor compares the thumbprints with the deployment's published set.
func reportKeys(rep *verifyReport, o verifyOpts) {
	if o.keys == nil {
		return
	}
	var ks []string
	for _, kid := range o.keys.KIDs() {
		ks = append(ks, clean(kid)+" (thumbprint "+o.keys.Thumbprint(kid)+")")
	}
	note := ""
	if strings.HasSuffix(o.keysFrom, "(beside the manifest)") {
		note = "; whoever can write the artifact store can replace them: compare the thumbprints with the deployment's /.well-known/jobgate-signing-keys, or pass --keys-file or --keys-url"
	}
	rep.ok("public keys: %s from %s%s", strings.Join(ks, ", "), clean(o.keysFrom), note)
}

const noPublicKeys = "no public keys (--keys-file, --keys-url, or " + contract.SigningKeysObject + " beside the manifest)"

// verifyManifestSignature checks the worker's signature over the whole manifest; without a
// valid one the digests, approval_required and the record's presence are only as good as the
// storage the manifest came from, so it fails unless the manifest is legacy and --allow-legacy
// accepts that — never for a manifest that carries an approval or says it is signed.
func verifyManifestSignature(rep *verifyReport, m *contract.Manifest, raw []byte, o verifyOpts) {
	if m.ManifestSignature != "" {
		if o.keys == nil {
			rep.fail("manifest signature: %s", noPublicKeys)
			return
		}
		kid, _, err := o.keys.VerifyManifest(raw)
		switch {
		case errors.Is(err, handle.ErrUnknownSigningKey):
			rep.fail("manifest signature: made with key %s, which the public keys do not hold (another deployment's keys, or a key no longer published)", clean(kid))
		case err != nil:
			rep.fail("manifest signature: does not verify (the manifest was altered after the worker signed it, or other keys)")
		default:
			rep.ok("manifest signature: Ed25519, every field of the manifest is as the worker signed it (key %s)", clean(kid))
		}
		return
	}
	switch {
	case m.Version >= contract.ManifestVersionSigned:
		rep.fail("manifest signature: missing, though the manifest says it is signed (manifest_version %d): removed", m.Version)
	case m.ManifestSeal == "" && (m.ApprovalRequired || m.Decision != nil):
		rep.fail("manifest signature: none, and the manifest carries an approval: its digests and record are only as good as the store it came from")
	case !o.allowLegacy:
		what := "unsigned and unsealed"
		if m.ManifestSeal != "" {
			what = "a legacy HMAC seal only (anyone holding the resume keys could have made it)"
		}
		rep.fail("manifest signature: none; the manifest has %s: pass --allow-legacy to accept a manifest made before signatures", what)
	case m.ManifestSeal == "":
		rep.ok("legacy manifest: unsigned and unsealed, accepted (--allow-legacy): nothing protects its digests")
	case o.resumeKeys == nil:
		rep.fail("legacy HMAC seal: no resume keys (--resume-keys-file): only a holder of the deployment's resume keys can check it")
	default:
		kid, _, err := o.resumeKeys.OpenManifest(raw)
		if err != nil {
			rep.fail("legacy HMAC seal: does not verify with these resume keys (the manifest was altered after the worker wrote it, or other keys)")
			return
		}
		rep.ok("legacy HMAC seal: every field of the manifest is as the worker wrote it (key %s; accepted: --allow-legacy; anyone holding the resume keys could have made it)", clean(kid))
	}
}

// openRecord checks the decision record against its Ed25519 signature, or (legacy, with
// --allow-legacy) its HMAC seal, and returns what was signed and the label of the report's
// lines; false when a check failed (reported).
func openRecord(rep *verifyReport, d *contract.DecisionRecord, o verifyOpts) (handle.Resume, string, bool) {
	var s handle.Resume
	label := "decision signature"
	switch {
	case d.Signature != "":
		if o.keys == nil {
			rep.fail("decision signature: %s", noPublicKeys)
			return s, "", false
		}
		var kid string
		var err error
		s, kid, err = o.keys.OpenDecision(d.Signature)
		switch {
		case errors.Is(err, handle.ErrUnknownSigningKey):
			rep.fail("decision signature: made with key %s, which the public keys do not hold", clean(kid))
			return s, "", false
		case err != nil:
			rep.fail("decision signature: does not verify with these public keys (forged, altered, or other keys)")
			return s, "", false
		}
		label += " (Ed25519, key " + clean(kid) + ")"
	case !o.allowLegacy:
		rep.fail("decision signature: none; the record has only a legacy HMAC seal (anyone holding the resume keys could have made it): pass --allow-legacy with --resume-keys-file to accept it")
		return s, "", false
	case d.Seal == "":
		rep.fail("decision seal: the record carries neither a signature nor a seal")
		return s, "", false
	case o.resumeKeys == nil:
		rep.fail("legacy HMAC seal (decision): no resume keys (--resume-keys-file): only a holder of the deployment's resume keys can check it")
		return s, "", false
	default:
		// Seals expire minutes after the decision, so an expired one is expected here: the
		// MAC is what counts, and the decision's time is checked against the expiry.
		var err error
		s, err = o.resumeKeys.OpenResume(d.Seal, time.Now())
		if err != nil && !errors.Is(err, handle.ErrExpired) {
			rep.fail("legacy HMAC seal (decision): does not open with these resume keys (forged, altered, or other keys)")
			return s, "", false
		}
		label = "legacy HMAC seal (decision, key " + sealKID(d.Seal) + "; accepted: --allow-legacy)"
	}
	if field := sealMismatch(s, d); field != "" {
		rep.fail("decision signature: the record's %s does not match what was signed", field)
		return s, "", false
	}
	return s, label, true
}

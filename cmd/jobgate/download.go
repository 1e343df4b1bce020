package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/jobgate/jobgate/frontend/wire"
)

func runJobsDownload(args []string, stdout, stderr io.Writer) error {
	var out string
	var force, useLink bool
	c := newJobCommand("jobs download", "Downloads a succeeded export's gzip file: reads a fresh download link (get_export), GETs it\n"+
		"with your bearer token, writes a temporary file next to the output and renames it only once\n"+
		"its SHA-256 matches the export's manifest (and the server's Repr-Digest).", stderr)
	c.StringVar(&out, "o", "", "output file, or an existing directory (default: the export's file_name in the current directory)")
	c.BoolVar(&force, "force", false, "overwrite the output file if it exists")
	c.BoolVar(&useLink, "use-link-host", false, "GET download_url exactly as the server built it, instead of from --url's host")
	c.jsonHelp("once the file is written and verified, print the get_export result it came from as JSON, unchanged (the file's path and checks go to stderr)")
	h, err := c.handle(args)
	if err != nil {
		return err
	}
	ctx, stop := untilInterrupted()
	defer stop()
	cl, err := c.conn.connect()
	if err != nil {
		return err
	}
	defer cl.Close()

	j, err := cl.getJob(ctx, h)
	if err != nil {
		return err
	}
	v := &j.view
	if !cliKindOf(j.kind).download {
		return &exitError{code: 1, err: fmt.Errorf("jobs download: %s is an %s job; only exports have a file to download", clean(v.JobID), j.kind)}
	}
	if v.Status != "succeeded" {
		return &exitError{code: 1, err: fmt.Errorf("jobs download: export %s %s; there is no file until it has succeeded", clean(v.JobID), notReady(v))}
	}
	var res wire.ExportResultView
	if err := v.DecodeResult(&res); err != nil {
		return fmt.Errorf("jobs download: get_export returned no usable result: %v", err)
	}
	if res.DownloadURL == "" {
		why := "the server gave no download_url"
		if res.Note != "" {
			why = clean(res.Note)
		}
		return &exitError{code: 1, err: fmt.Errorf("jobs download: export %s has no download link: %s", clean(v.JobID), why)}
	}
	want, err := hex.DecodeString(res.SHA256)
	if err != nil || len(want) != sha256.Size {
		return fmt.Errorf("jobs download: the export's sha256 %q is not a SHA-256", clean(res.SHA256))
	}
	link := res.DownloadURL
	if !useLink {
		if link, err = artifactURL(cl.endpoint, res.DownloadURL); err != nil {
			return err
		}
	}
	path, err := outputPath(out, res.FileName, force)
	if err != nil {
		return err
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, link, nil)
	if err != nil {
		return fmt.Errorf("jobs download: %w", err)
	}
	bearer, err := cl.bearer()
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header.Set("Accept-Encoding", "identity") // the file is gzip itself; take its bytes as they are
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, ResponseHeaderTimeout: time.Minute,
		TLSHandshakeTimeout: 15 * time.Second, DisableCompression: true}}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("jobs download: GET %s: %w", redactLink(link), err)
	}
	defer resp.Body.Close()
	if err := downloadStatus(resp); err != nil {
		return err
	}

	// Under --json stdout holds the get_export result alone, once the file is verified.
	human := c.info(stdout)
	n, sum, byHeader, err := saveVerified(path, resp.Body, res, want, resp.Header.Get("Repr-Digest"), human)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	fmt.Fprintf(human, "wrote %s: %d bytes, sha256 verified\n", path, n)
	matches := "matches the export's manifest"
	if byHeader {
		matches += " and the server's Repr-Digest"
	}
	var f fields
	f.add("sha256", sum+" ("+matches+")")
	f.add("rows", fmt.Sprintf("%d (%s: %s)", res.Rows, clean(res.Format), clean(strings.Join(res.Columns, ", "))))
	if res.ApprovedBy != "" {
		f.add("approved by", clean(res.ApprovedBy))
	}
	f.write(human, "  ")
	if c.asJSON {
		return printJSON(stdout, j.raw)
	}
	return nil
}

// notReady says why an export has no file yet: its status and what it waits for.
func notReady(v *wire.JobView) string {
	switch v.Status {
	case "awaiting_input":
		s := "is awaiting_input"
		if v.NeedsInput != nil {
			s += " (waiting for " + approverText(v.NeedsInput) + " to approve it)"
		}
		return s
	case "queued", "running", "cancelling":
		return fmt.Sprintf("is %s (%s); wait for it with 'jobgate jobs watch %s'", v.Status, progressText(v), v.Handle)
	case "failed", "cancelled":
		s := "is " + string(v.Status)
		if v.Error != nil {
			s += " (" + clean(v.Error.Code) + ": " + clean(v.Error.Message) + ")"
		}
		return s
	}
	return "is " + string(v.Status)
}

// artifactURL is where the CLI GETs the export's file. The server builds download_url from its
// public resource URI; the CLI asks the endpoint it was pointed at (--url) for the same
// /artifacts/<token> path instead — the contract serves POST /mcp and GET /artifacts/… from the
// same frontend, as siblings. That way the bearer token only ever goes to the host the user
// named, and a CLI reaching the server by another address (a port-forward, a private network,
// a dev stack) still downloads. --use-link-host takes download_url as it is.
func artifactURL(endpoint, link string) (string, error) {
	lu, err := url.Parse(link)
	if err != nil {
		return "", fmt.Errorf("jobs download: the server's download_url is not a URL: %w", err)
	}
	p := lu.EscapedPath()
	i := strings.LastIndex(p, "/artifacts/")
	if i < 0 || strings.Contains(p[i+len("/artifacts/"):], "/") {
		return "", fmt.Errorf("jobs download: the server's download_url is not an /artifacts/<token> link; try --use-link-host")
	}
	eu, err := url.Parse(endpoint)
	if err != nil || (eu.Scheme != "http" && eu.Scheme != "https") || eu.Host == "" {
		return "", fmt.Errorf("jobs download: --url %q is not an http(s) URL", endpoint)
	}
	base := *eu
	base.Path = strings.TrimSuffix(eu.Path, "/")
	base.RawPath = ""
	base.RawQuery, base.Fragment = "", ""
	rel, err := url.Parse("artifacts/" + p[i+len("/artifacts/"):])
	if err != nil {
		return "", fmt.Errorf("jobs download: the server's download_url: %w", err)
	}
	u := base.ResolveReference(rel)
	u.RawQuery = lu.RawQuery
	return u.String(), nil
}

// redactLink drops the signed token from a link for messages: it is a credential's half.
func redactLink(link string) string {
	if i := strings.LastIndex(link, "/artifacts/"); i >= 0 {
		return link[:i] + "/artifacts/…"
	}
	return "the download link"
}

// outputPath picks the file to write: -o (a file, or an existing directory to put file_name
// in), else file_name in the current directory. It refuses to overwrite without --force.
func outputPath(out, fileName string, force bool) (string, error) {
	name := filepath.Base(filepath.Clean("/" + strings.ReplaceAll(fileName, "\\", "/")))
	if name == "/" || name == "." || name == ".." || strings.HasPrefix(name, ".") || clean(name) != name {
		name = "export.gz"
	}
	path := out
	switch {
	case out == "":
		path = name
	default:
		if st, err := os.Stat(out); err == nil && st.IsDir() {
			path = filepath.Join(out, name)
		}
	}
	if st, err := os.Stat(path); err == nil {
		if st.IsDir() {
			return "", fmt.Errorf("jobs download: %s is a directory", path)
		}
		if !force {
			return "", &exitError{code: 1, err: fmt.Errorf("jobs download: %s exists; pass --force to overwrite it, or -o another file", path)}
		}
	}
	return path, nil
}

// downloadStatus turns a non-200 answer of GET /artifacts into a clear error.
func downloadStatus(resp *http.Response) error {
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	var why string
	switch resp.StatusCode {
	case http.StatusNotFound:
		why = "link expired or not yours; run download again (each run asks for a fresh link)"
	case http.StatusGone:
		why = "artifact deleted after retention; start a new export to get the data again"
	case http.StatusUnauthorized:
		why = "the token was refused (expired, or for another server?)"
	default:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
		why = oneLine(line)
		if resp.StatusCode == http.StatusServiceUnavailable {
			why += " (retry shortly)"
		}
	}
	return &exitError{code: 1, err: fmt.Errorf("jobs download: HTTP %d: %s", resp.StatusCode, why)}
}

// saveVerified streams body to a temporary file next to path while hashing it, and renames it
// to path only when its size and SHA-256 match the export (and the response's Repr-Digest,
// RFC 9530, when present). Anything else removes the temporary file.
func saveVerified(path string, body io.Reader, res wire.ExportResultView, want []byte, reprDigest string,
	stdout io.Writer) (n int64, sum string, byHeader bool, err error) {
	var fromHeader []byte
	if reprDigest != "" {
		if fromHeader, err = reprSHA256(reprDigest); err != nil {
			return 0, "", false, err
		}
		if fromHeader != nil && !bytes.Equal(fromHeader, want) {
			return 0, "", false, fmt.Errorf("jobs download: the server's Repr-Digest does not match the export's sha256; not downloading")
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.part")
	if err != nil {
		return 0, "", false, fmt.Errorf("jobs download: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	var w io.Writer = io.MultiWriter(tmp, h)
	if isTTY(stdout) {
		bar := progressbar.NewOptions64(res.Bytes, progressbar.OptionSetWriter(stdout), progressbar.OptionSetDescription("downloading"),
			progressbar.OptionShowBytes(true), progressbar.OptionShowCount(), progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(65*time.Millisecond), progressbar.OptionSetPredictTime(true),
			progressbar.OptionClearOnFinish())
		defer func() { _ = bar.Exit() }()
		w = io.MultiWriter(w, bar)
	}
	n, err = io.Copy(w, body)
	if err != nil {
		return n, "", false, fmt.Errorf("jobs download: interrupted after %d bytes: %w", n, err)
	}
	got := h.Sum(nil)
	switch {
	case n != res.Bytes:
		return n, "", false, fmt.Errorf("jobs download: got %d bytes, the export has %d; the file was discarded", n, res.Bytes)
	case !bytes.Equal(got, want):
		return n, "", false, fmt.Errorf("jobs download: sha256 mismatch: got %x, the export's is %s; the file was discarded", got, res.SHA256)
	}
	if err := tmp.Sync(); err != nil {
		return n, "", false, fmt.Errorf("jobs download: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return n, "", false, fmt.Errorf("jobs download: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return n, "", false, fmt.Errorf("jobs download: %w", err)
	}
	ok = true
	return n, hex.EncodeToString(got), fromHeader != nil, nil
}

// reprSHA256 reads the sha-256 member of a Repr-Digest field (RFC 9530: a structured-field
// dictionary of byte sequences, "sha-256=:<base64>:"). nil when there is none.
func reprSHA256(field string) ([]byte, error) {
	for _, member := range strings.Split(field, ",") {
		k, v, found := strings.Cut(strings.TrimSpace(member), "=")
		if !found || strings.ToLower(strings.TrimSpace(k)) != "sha-256" {
			continue
		}
		v, _, _ = strings.Cut(strings.TrimSpace(v), ";") // parameters, if any
		if len(v) < 2 || v[0] != ':' || v[len(v)-1] != ':' {
			return nil, errors.New("jobs download: malformed Repr-Digest sha-256 value")
		}
		b, err := base64.StdEncoding.DecodeString(v[1 : len(v)-1])
		if err != nil || len(b) != sha256.Size {
			return nil, errors.New("jobs download: malformed Repr-Digest sha-256 value")
		}
		return b, nil
	}
	return nil, nil
}

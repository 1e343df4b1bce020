package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/jobgate/jobgate/workflows/jobstate"
)

func TestArtifactURL(t *testing.T) {
	for _, c := range []struct{ endpoint, link, want string }{
		{"http://127.0.0.1:9000/mcp", "http://localhost/artifacts/tok.abc", "http://127.0.0.1:9000/artifacts/tok.abc"},
		{"https://gw.example.com/jobgate/mcp/", "https://jobgate.internal/artifacts/t%2Fx?a=1", "https://gw.example.com/jobgate/artifacts/t%2Fx?a=1"},
		{"https://h/mcp?x=1", "https://h/artifacts/t", "https://h/artifacts/t"},
	} {
		got, err := artifactURL(c.endpoint, c.link)
		if err != nil || got != c.want {
			t.Errorf("artifactURL(%q, %q) = %q, %v; want %q", c.endpoint, c.link, got, err, c.want)
		}
	}
	for _, link := range []string{"https://h/other/t", "https://h/artifacts/a/b", "::"} {
		if got, err := artifactURL("https://h/mcp", link); err == nil {
			t.Errorf("artifactURL(%q) = %q, want an error", link, got)
		}
	}
	if _, err := artifactURL("ftp://h/mcp", "https://h/artifacts/t"); err == nil {
		t.Error("artifactURL accepted a non-http endpoint")
	}
}

func TestReprSHA256(t *testing.T) {
	sum := sha256.Sum256([]byte("x"))
	b64 := base64.StdEncoding.EncodeToString(sum[:])
	for _, field := range []string{"sha-256=:" + b64 + ":", "sha-512=:AAAA:, SHA-256=:" + b64 + ":"} {
		got, err := reprSHA256(field)
		if err != nil || !bytes.Equal(got, sum[:]) {
			t.Errorf("reprSHA256(%q) = %x, %v", field, got, err)
		}
	}
	if got, err := reprSHA256("sha-512=:AAAA:"); got != nil || err != nil {
		t.Errorf("no sha-256 member: got %x, %v; want nil, nil", got, err)
	}
	for _, bad := range []string{"sha-256=" + b64, "sha-256=:AAAA:", "sha-256=:!!:"} {
		if _, err := reprSHA256(bad); err == nil {
			t.Errorf("reprSHA256(%q): want an error", bad)
		}
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		24*time.Hour - time.Second: "23h59m", 2 * time.Hour: "2h", 90 * time.Second: "1m", 42 * time.Second: "42s",
		49*time.Hour + 5*time.Minute: "49h5m",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%s) = %q, want %q", d, got, want)
		}
	}
	now := time.Now()
	if got := untilText(now.Add(-5*time.Minute), now); got != "expired 5m ago" {
		t.Errorf("untilText(past) = %q", got)
	}
}

func TestParseInterspersed(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	comment := fs.String("comment", "", "")
	pos, err := parseInterspersed(fs, []string{"h1", "--comment", "ok", "--", "-h2"})
	if err != nil || *comment != "ok" || !slices.Equal(pos, []string{"h1", "-h2"}) {
		t.Errorf("got %v %q %v", pos, *comment, err)
	}
}

func TestScopeRendering(t *testing.T) {
	var f fields
	addScope(&f, map[string]any{"purpose": "churn\x1b[31m", "dataset": "customers", "columns": []any{"id", "email"},
		"max_rows": float64(1000000), "sensitive_columns": []any{"email"}, "zeta": true})
	var buf strings.Builder
	f.write(&buf, "")
	want := "dataset:   customers\ncolumns:   id, email\nsensitive: email\npurpose:   churn?[31m\nrows:      up to 1000000\nzeta:      true\n"
	if buf.String() != want {
		t.Errorf("scope block:\n%s\nwant:\n%s", buf.String(), want)
	}
}

func TestPlainWatchPrintsChangesOnly(t *testing.T) {
	var buf strings.Builder
	p := &plainWatch{w: &buf}
	v := &wire.JobView{}
	v.Status = jobstate.StatusRunning
	v.Progress = jobstate.Progress{Done: 1, Total: 4, Unit: "episodes", Message: "scoring"}
	p.update(v)
	p.update(v)
	v.Progress.Done = 2
	p.update(v)
	if got := buf.String(); got != "running 1/4 episodes scoring\nrunning 2/4 episodes scoring\n" {
		t.Errorf("plain watch output:\n%s", got)
	}
}

func TestBarWatchRenders(t *testing.T) {
	var buf bytes.Buffer
	b := &barWatch{w: &buf}
	v := &wire.JobView{}
	v.Status = jobstate.StatusQueued
	v.Progress = jobstate.Progress{Unit: "rows", Message: "queued"}
	b.update(v)
	v.Status = jobstate.StatusRunning
	v.Progress = jobstate.Progress{Done: 2500, Total: 5000, Unit: "rows", Message: "exporting"}
	b.update(v)
	v.Status = jobstate.StatusSucceeded
	v.Progress.Done = 5000
	b.update(v)
	b.finish(v)
	out := buf.String()
	for _, want := range []string{"running: exporting", "2500/5000", "succeeded 5000/5000 rows"} {
		if !strings.Contains(out, want) {
			t.Errorf("bar output lacks %q:\n%q", want, out)
		}
	}
}

func TestSaveVerifiedDiscardsMismatch(t *testing.T) {
	dir := t.TempDir()
	body := []byte("the file")
	sum := sha256.Sum256(body)
	res := wire.ExportResultView{Bytes: int64(len(body)), SHA256: hex.EncodeToString(sum[:])}
	path := filepath.Join(dir, "out.gz")

	other := sha256.Sum256([]byte("other"))
	if _, _, _, err := saveVerified(path, bytes.NewReader(body), res, other[:], "", io.Discard); err == nil || !strings.Contains(err.Error(), "sha256 mismatch") {
		t.Fatalf("mismatch: got %v", err)
	}
	wrongHeader := "sha-256=:" + base64.StdEncoding.EncodeToString(other[:]) + ":"
	if _, _, _, err := saveVerified(path, bytes.NewReader(body), res, sum[:], wrongHeader, io.Discard); err == nil || !strings.Contains(err.Error(), "Repr-Digest") {
		t.Fatalf("Repr-Digest mismatch: got %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a refused download left %v behind", entries)
	}
	goodHeader := "sha-256=:" + base64.StdEncoding.EncodeToString(sum[:]) + ":"
	n, got, byHeader, err := saveVerified(path, bytes.NewReader(body), res, sum[:], goodHeader, io.Discard)
	if err != nil || n != int64(len(body)) || got != res.SHA256 || !byHeader {
		t.Fatalf("good download: %d %s %v %v", n, got, byHeader, err)
	}
	if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, body) {
		t.Fatalf("saved file: %q %v", b, err)
	}
}

func TestDownloadStatusMessages(t *testing.T) {
	for code, want := range map[int]string{
		http.StatusNotFound: "link expired or not yours; run download again",
		http.StatusGone:     "artifact deleted after retention",
	} {
		err := downloadStatus(&http.Response{StatusCode: code, Body: io.NopCloser(strings.NewReader(""))})
		if err == nil || !strings.Contains(err.Error(), want) || exitCode(err) != 1 {
			t.Errorf("HTTP %d: got %v (exit %d), want %q", code, err, exitCode(err), want)
		}
	}
}

func TestOutputPath(t *testing.T) {
	dir := t.TempDir()
	if p, err := outputPath(dir, "../../etc/x.csv.gz", false); err != nil || p != filepath.Join(dir, "x.csv.gz") {
		t.Errorf("directory -o: %q %v", p, err)
	}
	if p, err := outputPath("", "..", false); err != nil || p != "export.gz" {
		t.Errorf("bad file_name: %q %v", p, err)
	}
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := outputPath(f, "x", false); err == nil {
		t.Error("overwrote without --force")
	}
	if p, err := outputPath(f, "x", true); err != nil || p != f {
		t.Errorf("--force: %q %v", p, err)
	}
}

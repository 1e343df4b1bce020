package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestCompletionTreeMatchesUsage: every command of the completion tree is one run dispatches
// (it answers -h with its usage, not "unknown command"), and every command the usage text names
// is in the tree.
func TestCompletionTreeMatchesUsage(t *testing.T) {
	tree := commandTree()
	for _, n := range tree {
		var paths [][]string
		if n.subs == nil {
			paths = append(paths, []string{n.name})
		}
		for _, s := range n.subs {
			if n.name != "completion" {
				paths = append(paths, []string{n.name, s.name})
			}
		}
		for _, p := range paths {
			var stderr bytes.Buffer
			err := run(append(slices.Clone(p), "-h"), io.Discard, &stderr)
			if err != nil && strings.Contains(err.Error(), "unknown") {
				t.Errorf("jobgate %s: %v", strings.Join(p, " "), err)
			}
			if !strings.Contains(stderr.String(), "Usage") {
				t.Errorf("jobgate %s -h printed no usage:\n%s", strings.Join(p, " "), stderr.String())
			}
		}
	}
	for _, l := range strings.Split(usage, "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || f[0] != "jobgate" || f[1] == "—" || strings.HasPrefix(f[1], "<") {
			continue
		}
		if !slices.ContainsFunc(tree, func(n cmdNode) bool { return n.name == f[1] }) {
			t.Errorf("usage names 'jobgate %s', which the completion tree lacks", f[1])
		}
	}
}

// TestEveryClientCommandHasJSON: --json is on every client command (jobs …, approvals …, whoami),
// and any command built with newClientCommand gets it.
func TestEveryClientCommandHasJSON(t *testing.T) {
	tree := completionTree()
	for _, n := range tree {
		switch n.name {
		case "jobs", "approvals":
			for _, s := range n.subs {
				if !slices.Contains(s.flags, "json") {
					t.Errorf("jobgate %s %s has no --json (flags %v)", n.name, s.name, s.flags)
				}
			}
		case "whoami", "version":
			if !slices.Contains(n.flags, "json") {
				t.Errorf("jobgate %s has no --json (flags %v)", n.name, n.flags)
			}
		}
	}
	c := newClientCommand("new thing", "a command added later", io.Discard)
	if c.Lookup("json") == nil {
		t.Error("newClientCommand registers no --json")
	}
}

// TestCompletionBash drives the generated script in a real bash: commands, a group's
// subcommands, a command's flags (read from its flag set), the shells of completion itself.
func TestCompletionBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash: %v", err) // Debian's base system has it
	}
	var script bytes.Buffer
	if err := run([]string{"completion", "bash"}, &script, io.Discard); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "jobgate.bash")
	if err := os.WriteFile(path, script.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	complete := func(words ...string) []string {
		t.Helper()
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = "'" + w + "'"
		}
		cmd := exec.Command(bash, "--norc", "-c", "complete() { :; }; source "+path+"; COMP_WORDS=(jobgate "+strings.Join(quoted, " ")+
			"); COMP_CWORD="+itoa(len(words))+"; _jobgate; printf '%s\\n' \"${COMPREPLY[@]}\"")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		return strings.Fields(string(out))
	}
	for _, c := range []struct {
		words []string
		want  []string
	}{
		{[]string{"jo"}, []string{"jobs"}},
		{[]string{"ve"}, []string{"verify", "version"}},
		{[]string{"jobs", "ge"}, []string{"get"}},
		{[]string{"jobs", "list", "--w"}, []string{"--wide"}},
		{[]string{"jobs", "get", "acme/eval/ana/k", "--j"}, []string{"--json"}},
		{[]string{"approvals", "approve", "--c"}, []string{"--comment"}},
		{[]string{"--help", "approvals", "a"}, []string{"approve"}},
		{[]string{"completion", ""}, []string{"bash", "zsh", "fish"}},
		{[]string{"serve", "--temporal-tls-c"}, []string{"--temporal-tls-ca-file", "--temporal-tls-cert-file"}},
		{[]string{"jobs", "get", "ac"}, nil}, // a job: the shell's default (files), nothing of ours
	} {
		if got := complete(c.words...); !slices.Equal(got, c.want) {
			t.Errorf("jobgate %s<TAB>: %q, want %q", strings.Join(c.words, " "), got, c.want)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestCompletionZshFish: the zsh and fish scripts name every command and the flags of a client
// command, and parse in their shell where it is installed (zsh -n, fish --no-execute).
func TestCompletionZshFish(t *testing.T) {
	for _, sh := range []string{"zsh", "fish"} {
		var out bytes.Buffer
		if err := run([]string{"completion", sh}, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		s := out.String()
		for _, want := range []string{"jobs", "approvals", "completion", "wide", "json", "comment"} {
			if !strings.Contains(s, want) {
				t.Errorf("%s script lacks %q", sh, want)
			}
		}
		if bin, err := exec.LookPath(sh); err == nil {
			path := filepath.Join(t.TempDir(), "jobgate."+sh)
			if err := os.WriteFile(path, out.Bytes(), 0o600); err != nil {
				t.Fatal(err)
			}
			flag := map[string]string{"zsh": "-n", "fish": "--no-execute"}[sh]
			if b, err := exec.Command(bin, flag, path).CombinedOutput(); err != nil {
				t.Errorf("%s %s: %v\n%s", sh, flag, err, b)
			}
			if sh == "fish" { // fish completes a command line on request: drive it
				for line, want := range map[string]string{"jobgate jobs li": "list", "jobgate jobs list --wi": "--wide", "jobgate approvals approve x --co": "--comment"} {
					b, err := exec.Command(bin, "-c", "source "+path+"; complete -C'"+line+"'").CombinedOutput()
					if got := strings.Fields(string(b)); err != nil || len(got) == 0 || got[0] != want {
						t.Errorf("fish %q: %q (%v), want %q", line, b, err, want)
					}
				}
			}
		} else {
			t.Logf("%s is not installed here: its script is checked for content only", sh)
		}
	}
	var stderr bytes.Buffer
	if err := run([]string{"completion", "powershell"}, io.Discard, &stderr); exitCode(err) != 2 || !strings.Contains(err.Error(), "unknown shell") {
		t.Errorf("completion powershell: %v (exit %d), want a usage error", err, exitCode(err))
	}
}

// TestVersionLine: the build ID's parts as `jobgate version` prints them.
func TestVersionLine(t *testing.T) {
	mod := true
	b := buildInfo{Version: "0.1.0", ModuleVersion: "v0.1.1-0.20261205-abc", Revision: "abc123", Time: "2026-12-05T06:00:00Z", Modified: &mod, GoVersion: "go1.26.8"}
	if got, want := b.String(), "jobgate 0.1.0 (module v0.1.1-0.20261205-abc) revision abc123+modified of 2026-12-05T06:00:00Z, go1.26.8"; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got := (buildInfo{Version: "0.1.0"}).String(); !strings.Contains(got, "revision unknown") {
		t.Errorf("no VCS information: %s", got)
	}
	if r := readBuildInfo(); r.GoVersion == "" || r.Version == "" {
		t.Errorf("readBuildInfo: %+v", r)
	}
}

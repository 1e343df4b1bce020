package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/jobgate/jobgate/frontend/wire"
)

// What the binary says about itself: its commands and flags as shell completion, and its build.
//
// Shell completion: `jobgate completion bash|zsh|fish` prints a script completing commands,
// subcommands and flags. The flags are not listed by hand: each command is asked for its own
// (it is run with -h, which prints its flag set and runs nothing), so a flag a command gains is
// completed without a change here. The command tree is the one place naming the commands;
// TestCompletionTreeMatchesUsage keeps it and the usage text in step.

// A cmdNode is a command, or a group of subcommands ("jobs": list, get, …).
type cmdNode struct {
	name    string
	aliases []string
	subs    []cmdNode // a group's subcommands; nil for a command
	flags   []string  // filled by completionTree: the command's flags, without dashes
}

// commandTree is every command of `jobgate`, as run dispatches them.
func commandTree() []cmdNode {
	leaf := func(name string, aliases ...string) cmdNode { return cmdNode{name: name, aliases: aliases} }
	group := func(name string, subs ...cmdNode) cmdNode { return cmdNode{name: name, subs: subs} }
	return []cmdNode{
		leaf("dev"), leaf("serve"), leaf("worker"), leaf("temporal"), leaf("setup"),
		group("deploy", leaf("status"), leaf("set-current"), leaf("ramp"), leaf("build-id")),
		leaf("replay"), leaf("token"),
		group("keygen", leaf("payload-kek"), leaf("signing-keys"), leaf("resume-keys"), leaf("handle-keys")),
		group("payload-keys", leaf("list"), leaf("rotate")),
		group("tenant", leaf("forget")),
		leaf("login"), leaf("whoami"), leaf("logout"),
		group("jobs", leaf("list", "ls"), leaf("get", "show"), leaf("watch"), leaf("download"), leaf("describe"), leaf("episodes")),
		group("approvals", leaf("list", "ls"), leaf("approve"), leaf("reject")), leaf("usage"),
		leaf("verify"), leaf("version"),
		group("completion", leaf("bash"), leaf("zsh"), leaf("fish")),
	}
}

// flagLine matches a flag in a flag set's -h output ("  -name type").
var flagLine = regexp.MustCompile(`(?m)^  -([A-Za-z0-9][A-Za-z0-9_.-]*)`)

// flagsOf runs path with -h and reads the flags it prints.
func flagsOf(path []string) []string {
	var out bytes.Buffer
	_ = run(append(slices.Clone(path), "-h"), io.Discard, &out)
	var flags []string
	for _, m := range flagLine.FindAllStringSubmatch(out.String(), -1) {
		if !slices.Contains(flags, m[1]) {
			flags = append(flags, m[1])
		}
	}
	return flags
}

// completionTree is commandTree with every command's flags.
func completionTree() []cmdNode {
	tree := commandTree()
	for i := range tree {
		n := &tree[i]
		if n.subs == nil {
			n.flags = flagsOf([]string{n.name})
			continue
		}
		if n.name == "completion" {
			continue // its "subcommands" are shells: no flags
		}
		for j := range n.subs {
			n.subs[j].flags = flagsOf([]string{n.name, n.subs[j].name})
		}
	}
	return tree
}

func names(ns []cmdNode) string {
	var s []string
	for _, n := range ns {
		s = append(s, n.name)
	}
	return strings.Join(s, " ")
}

func dashed(flags []string) string {
	var s []string
	for _, f := range flags {
		s = append(s, "--"+f)
	}
	return strings.Join(s, " ")
}

// casePattern is a shell case pattern matching n's name and aliases.
func casePattern(n cmdNode) string { return strings.Join(append([]string{n.name}, n.aliases...), "|") }

// shellCase is the case statement bash and zsh share: it sets w to the words to offer, given cmd
// (the first word after jobgate), sub (a group's subcommand) and cur (the word being completed).
// Flags are offered once cur starts with '-'; otherwise nothing, so the shell completes files.
func shellCase(tree []cmdNode) string {
	var b strings.Builder
	b.WriteString("    case \"$cmd\" in\n")
	fmt.Fprintf(&b, "    '') w=%q ;;\n", names(tree))
	for _, n := range tree {
		if n.subs == nil {
			fmt.Fprintf(&b, "    %s) [[ $cur == -* ]] && w=%q ;;\n", casePattern(n), dashed(n.flags))
			continue
		}
		fmt.Fprintf(&b, "    %s)\n        if [[ -z $sub ]]; then w=%q\n        else\n            case \"$sub\" in\n", n.name, names(n.subs))
		for _, s := range n.subs {
			if len(s.flags) > 0 {
				fmt.Fprintf(&b, "            %s) [[ $cur == -* ]] && w=%q ;;\n", casePattern(s), dashed(s.flags))
			}
		}
		b.WriteString("            esac\n        fi ;;\n")
	}
	b.WriteString("    esac\n")
	return b.String()
}

// groupsPattern is the case pattern of the groups (commands whose next word is a subcommand).
func groupsPattern(tree []cmdNode) string {
	var g []string
	for _, n := range tree {
		if n.subs != nil {
			g = append(g, n.name)
		}
	}
	return strings.Join(g, "|")
}

// scanWords is the shell loop (bash and zsh alike) finding cmd and sub among the words before
// the one being completed: the first word not starting with '-', and for a group the next one.
const scanWords = `    local cmd="" sub="" w="" i
    for ((i = FIRST; i < LAST; i++)); do
        local a="${WORDS[i]}"
        [[ $a == -* ]] && continue
        if [[ -z $cmd ]]; then
            cmd=$a
            case "$cmd" in GROUPS) ;; *) break ;; esac
        else
            sub=$a
            break
        fi
    done
`

func bashCompletion(tree []cmdNode) string {
	scan := strings.NewReplacer("FIRST", "1", "LAST", "COMP_CWORD", "WORDS", "COMP_WORDS", "GROUPS", groupsPattern(tree)).Replace(scanWords)
	return "# bash completion for jobgate: source <(jobgate completion bash)\n" +
		"# (or save it as /etc/bash_completion.d/jobgate)\n" +
		"_jobgate() {\n" +
		"    local cur=\"${COMP_WORDS[COMP_CWORD]}\"\n" + scan + shellCase(tree) +
		"    COMPREPLY=($(compgen -W \"$w\" -- \"$cur\"))\n" +
		"}\n" +
		"complete -o default -F _jobgate jobgate\n"
}

func zshCompletion(tree []cmdNode) string {
	scan := strings.NewReplacer("FIRST", "2", "LAST", "CURRENT", "WORDS", "words", "GROUPS", "("+groupsPattern(tree)+")").Replace(scanWords)
	return "#compdef jobgate\n" +
		"# zsh completion for jobgate: source <(jobgate completion zsh), or save it as _jobgate in a\n" +
		"# directory of $fpath (compinit loads it)\n" +
		"_jobgate() {\n" +
		"    local cur=\"${words[CURRENT]}\"\n" + scan + shellCase(tree) +
		"    local -a cands\n" +
		"    cands=(${=w})\n" +
		"    if (( ${#cands} )); then compadd -- $cands; else _files; fi\n" +
		"}\n" +
		"if [[ \"${funcstack[1]}\" == _jobgate ]]; then _jobgate \"$@\"; else compdef _jobgate jobgate; fi\n"
}

func fishCompletion(tree []cmdNode) string {
	var b strings.Builder
	b.WriteString("# fish completion for jobgate: jobgate completion fish > ~/.config/fish/completions/jobgate.fish\n")
	fmt.Fprintf(&b, "complete -c jobgate -n __fish_use_subcommand -f -a %q\n", names(tree))
	flags := func(cond string, fs []string) {
		for _, f := range fs {
			fmt.Fprintf(&b, "complete -c jobgate -n %q -l %s\n", cond, f)
		}
	}
	for _, n := range tree {
		if n.subs == nil {
			flags("__fish_seen_subcommand_from "+n.name, n.flags)
			continue
		}
		var subNames []string
		for _, s := range n.subs {
			subNames = append(subNames, s.name)
			subNames = append(subNames, s.aliases...)
		}
		fmt.Fprintf(&b, "complete -c jobgate -n %q -f -a %q\n",
			"__fish_seen_subcommand_from "+n.name+"; and not __fish_seen_subcommand_from "+strings.Join(subNames, " "), names(n.subs))
		for _, s := range n.subs {
			flags("__fish_seen_subcommand_from "+n.name+"; and __fish_seen_subcommand_from "+casePatternSpaced(s), s.flags)
		}
	}
	return b.String()
}

func casePatternSpaced(n cmdNode) string {
	return strings.Join(append([]string{n.name}, n.aliases...), " ")
}

const completionUsage = `Usage: jobgate completion bash|zsh|fish

Prints a shell completion script for jobgate's commands, subcommands and flags:
  bash   source <(jobgate completion bash)       (or save it in /etc/bash_completion.d/)
  zsh    source <(jobgate completion zsh)        (or save it as _jobgate in a directory of $fpath)
  fish   jobgate completion fish > ~/.config/fish/completions/jobgate.fish
`

func runCompletion(args []string, stdout, stderr io.Writer) error {
	if len(args) != 1 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stderr, completionUsage)
		if len(args) == 1 {
			return flag.ErrHelp
		}
		return fmt.Errorf("completion: want one shell: bash, zsh or fish")
	}
	gen := map[string]func([]cmdNode) string{"bash": bashCompletion, "zsh": zshCompletion, "fish": fishCompletion}[args[0]]
	if gen == nil {
		fmt.Fprint(stderr, completionUsage)
		return fmt.Errorf("completion: unknown shell %q (want bash, zsh or fish)", args[0])
	}
	_, err := io.WriteString(stdout, gen(completionTree()))
	return err
}

// buildInfo is what `jobgate version` reports: the product version and the build ID the Go
// toolchain stamped into this binary (runtime/debug.ReadBuildInfo: the main module's version, and
// the VCS revision, time and modified flag of the tree it was built from, when it was built in a
// checkout).
type buildInfo struct {
	Version       string `json:"version"`
	ModulePath    string `json:"module_path,omitempty"`
	ModuleVersion string `json:"module_version,omitempty"`
	Revision      string `json:"vcs_revision,omitempty"`
	Time          string `json:"vcs_time,omitempty"`
	Modified      *bool  `json:"vcs_modified,omitempty"`
	GoVersion     string `json:"go_version,omitempty"`
}

// readBuildInfo reads this binary's build information.
func readBuildInfo() buildInfo {
	b := buildInfo{Version: wire.Version}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.ModulePath, b.ModuleVersion, b.GoVersion = bi.Main.Path, bi.Main.Version, bi.GoVersion
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			m := s.Value == "true"
			b.Modified = &m
		}
	}
	return b
}

// String is the one line `jobgate version` prints.
func (b buildInfo) String() string {
	s := "jobgate " + b.Version
	if b.ModuleVersion != "" {
		s += " (module " + b.ModuleVersion + ")"
	}
	if b.Revision != "" {
		s += " revision " + b.Revision
		if b.Modified != nil && *b.Modified {
			s += "+modified"
		}
		if b.Time != "" {
			s += " of " + b.Time
		}
	} else {
		s += " revision unknown (built outside a VCS checkout, or with -buildvcs=false)"
	}
	if b.GoVersion != "" {
		s += ", " + b.GoVersion
	}
	return s
}

func runVersion(args []string, stdout, stderr io.Writer) error {
	var asJSON bool
	fs := newFlagSet("version", "Prints the version and build ID of this binary: the module version, and the VCS revision,\n"+
		"commit time and whether the tree had uncommitted changes (from the Go build information).", stderr)
	fs.BoolVar(&asJSON, "json", false, "print the build information as JSON")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	b := readBuildInfo()
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(b)
	}
	_, err := fmt.Fprintln(stdout, b.String())
	return err
}

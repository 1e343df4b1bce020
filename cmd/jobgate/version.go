package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/jobgate/jobgate/frontend/wire"
)

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

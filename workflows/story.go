package workflows

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Story is how a kind's jobs read in a job's timeline (the frontend's describe_job, `jobgate
// jobs describe`): the words for its activities and a one-line summary of its start
// arguments. The frontend narrates a history with it and never switches on kind names, so a
// new kind describes its own events here, next to its workflow. Plain data: nothing in it
// runs inside a workflow.
type Story struct {
	// Steps names each activity type of the kind as a noun (singular, plural): a run of
	// completed "ExportPart" activities reads "parts 1–40 succeeded". An activity missing
	// here reads as its type name.
	Steps map[string][2]string
	// Args summarises the workflow input (its JSON) in one line for the "started" line. It
	// must not return secrets; it is shown to the job's owner.
	Args func(input json.RawMessage) string
}

// StepNoun is the noun for activity type name: singular for n == 1, plural otherwise.
func (s Story) StepNoun(name string, n int) string {
	w, ok := s.Steps[name]
	if !ok {
		return name
	}
	if n == 1 {
		return w[0]
	}
	return w[1]
}

// ArgsLine is Args(input), or "" when the kind has none or the input does not decode.
func (s Story) ArgsLine(input json.RawMessage) string {
	if s.Args == nil || len(input) == 0 {
		return ""
	}
	return s.Args(input)
}

func evalStory() Story {
	return Story{
		Steps: map[string][2]string{"RunEpisode": {"episode", "episodes"}, "WriteEpisodes": {"episode log write", "episode log writes"}},
		Args: func(raw json.RawMessage) string {
			var in EvalInput
			if json.Unmarshal(raw, &in) != nil {
				return ""
			}
			s := fmt.Sprintf("suite %s, %d episodes, concurrency %d", in.Args.Suite, in.Args.Episodes, in.Args.Concurrency)
			if in.State != nil {
				s += fmt.Sprintf(" (continued at episode %d)", in.State.Next)
			}
			return s
		},
	}
}

func exportStory() Story {
	return Story{
		Steps: map[string][2]string{
			"PlanExport":     {"plan", "plans"},
			"ExportPart":     {"part", "parts"},
			"FinalizeExport": {"finalize", "finalizes"},
			"DeleteExport":   {"artifact deletion", "artifact deletions"},
		},
		Args: func(raw json.RawMessage) string {
			var in ExportInput
			if json.Unmarshal(raw, &in) != nil {
				return ""
			}
			return fmt.Sprintf("dataset %s, format %s, columns %s, purpose %q", in.Args.Dataset, in.Args.Format,
				strings.Join(in.Args.Columns, ","), in.Args.Purpose)
		},
	}
}

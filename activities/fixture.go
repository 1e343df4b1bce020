package activities

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/jobgate/jobgate/activities/contract"
)

// The conformance fixtures' one activity (workflows/fixture.go, served only by `jobgate dev
// --conformance-fixtures`): it composes the text a fixture job answers with. It has no side
// effect, so every attempt returns the same text for the same input.

// FixtureText composes a fixture job's answer: the greeting, the computation or what the
// answered questions said.
func (a *Activities) FixtureText(_ context.Context, in contract.FixtureTextIn) (contract.FixtureTextOut, error) {
	var text string
	switch {
	case in.Name != "":
		text = "Hello, " + in.Name + "!"
	case in.Target != "":
		text = "Deleted " + in.Target
	case in.Label != "":
		text = fmt.Sprintf("Computed %s after %d seconds", in.Label, in.Seconds)
	default:
		text = fmt.Sprintf("%s finished after %d seconds", in.Tool, in.Seconds)
	}
	if len(in.Answers) > 0 {
		keys := make([]string, 0, len(in.Answers))
		for k := range in.Answers {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s=%v", k, in.Answers[k])
		}
		text += " (answers: " + strings.Join(parts, "; ") + ")"
	}
	return contract.FixtureTextOut{Text: text}, nil
}

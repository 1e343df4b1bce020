package contract

// FixtureTextIn is what a fixture job computed: the tool that started it, its arguments and
// the answers it gathered.
type FixtureTextIn struct {
	Tool    string         `json:"tool"`
	Name    string         `json:"name,omitempty"`
	Label   string         `json:"label,omitempty"`
	Seconds int            `json:"seconds,omitempty"`
	Target  string         `json:"target,omitempty"`
	Answers map[string]any `json:"answers,omitempty"`
}

// FixtureTextOut is the fixture job's answer text.
type FixtureTextOut struct {
	Text string `json:"text"`
}

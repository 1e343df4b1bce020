package wire

import (
	"time"

	"github.com/jobgate/jobgate/workflows/jobstate"
)

// describe_job limits (CONTRACT.md): how many timeline lines one answer holds.
const (
	StoryLinesDefault = 200
	StoryLinesMax     = 1000
	StoryLinesMin     = 10
)

// StoryLine is one line of a job's timeline.
type StoryLine struct {
	At   time.Time `json:"at" jsonschema:"when it happened (the first event of a summarised run of events)"`
	Text string    `json:"text" jsonschema:"what happened, in words"`
}

// DescribeJobOut is describe_job's result: a job's timeline from its Temporal history.
type DescribeJobOut struct {
	JobID  string          `json:"job_id" jsonschema:"the job's ID"`
	Kind   string          `json:"kind" jsonschema:"the job's kind (eval, export)"`
	Status jobstate.Status `json:"status" jsonschema:"the job's current status, as in the job view"`
	Owner  string          `json:"owner" jsonschema:"the subject that started the job"`
	// StartedAt and EndedAt bound the job: first run's start to the last run's close.
	StartedAt time.Time   `json:"started_at" jsonschema:"when the job's first run started"`
	EndedAt   *time.Time  `json:"ended_at,omitempty" jsonschema:"when the job's last run closed; absent while it runs"`
	Duration  string      `json:"duration" jsonschema:"ended_at minus started_at, or so far for a running job (Go duration, e.g. 1h2m3s)"`
	Runs      int         `json:"runs" jsonschema:"workflow runs read, first to current (an eval continues as new every N episodes)"`
	Events    int         `json:"events" jsonschema:"history events read"`
	Actions   int         `json:"actions" jsonschema:"Temporal actions those events show, by the rules Temporal Cloud bills by (docs.temporal.io/cloud/actions): starts, timers, search attribute upserts, signals, accepted updates, side effects, local activity tasks and every activity attempt; queries, rejected updates and heartbeats are not in a history and not counted"`
	Lines     []StoryLine `json:"lines" jsonschema:"the timeline, oldest first; runs of similar events are summarised in one line"`
	Cut       string      `json:"cut,omitempty" jsonschema:"what was left out to stay within max_lines or the event budget; absent when nothing was"`
	Detail    string      `json:"detail" jsonschema:"full: error messages as recorded (jobs:admin); owner: error types and the messages job views show, since recorded messages can name a dataset's host, user or database"`
	UIURL     string      `json:"ui_url,omitempty" jsonschema:"the job in the Temporal Web UI, when this server shows you ui_url in job views"`
}

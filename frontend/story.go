package frontend

import (
	"fmt"
	"time"

	"github.com/jobgate/jobgate/frontend/wire"
)

// StoryLine and DescribeJobOut are describe_job's shapes (wire).
type (
	StoryLine      = wire.StoryLine
	DescribeJobOut = wire.DescribeJobOut
)

// storyMaxEvents bounds the history one describe_job reads (every run of the chain together):
// a 20,000-episode eval is ~4 events an episode, so this reads a whole one and stops a
// runaway history from holding a request for minutes. What is left unread is said (Cut).
const storyMaxEvents = 200_000

// storyRequest is what the store needs to narrate a job's history (jobStore.Story).
type storyRequest struct {
	id       string
	maxLines int
	// full: error messages as recorded (admins); otherwise types and job-view messages only.
	full bool
	// jobErr is the job's error as its view shows it (sanitized), for the end line.
	jobErrCode, jobErrMsg string
}

// storyResult is the narrated history.
type storyResult struct {
	lines          []StoryLine
	cut            string
	runs, events   int
	started, ended time.Time
}

// storyBuf keeps the first half and the last half of max lines, counting what falls between:
// a long history's beginning (who started it, the approval) and its end both matter.
type storyBuf struct {
	max        int
	head, tail []StoryLine
	next       int // ring position in tail
	dropped    int
}

func (b *storyBuf) add(l StoryLine) {
	headMax := (b.max + 1) / 2
	if len(b.head) < headMax {
		b.head = append(b.head, l)
		return
	}
	tailMax := b.max - headMax
	if len(b.tail) < tailMax {
		b.tail = append(b.tail, l)
		return
	}
	b.dropped++
	if tailMax == 0 {
		return
	}
	b.tail[b.next] = l
	b.next = (b.next + 1) % tailMax
}

// lines returns the kept lines in order and what was cut ("" when nothing).
func (b *storyBuf) lines() ([]StoryLine, string) {
	out := append([]StoryLine{}, b.head...)
	if b.dropped == 0 {
		return append(out, b.tail...), ""
	}
	cut := fmt.Sprintf("%d timeline lines between line %d and the last %d were left out (max_lines %d)",
		b.dropped, len(b.head), len(b.tail), b.max)
	out = append(out, StoryLine{At: b.tail[b.next].At, Text: fmt.Sprintf("… %d lines left out …", b.dropped)})
	out = append(out, b.tail[b.next:]...)
	return append(out, b.tail[:b.next]...), cut
}

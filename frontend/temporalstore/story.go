package temporalstore

import (
	"fmt"

	"github.com/jobgate/jobgate/frontend/wire"
)

// storyMaxEvents bounds the history one describe_job reads (every run of the chain together):
// a 20,000-episode eval is ~4 events an episode, so this reads a whole one and stops a
// runaway history from holding a request for minutes. What is left unread is said (Cut).
const storyMaxEvents = 200_000

// storyBuf keeps the first half and the last half of max lines, counting what falls between:
// a long history's beginning (who started it, the approval) and its end both matter.
type storyBuf struct {
	max        int
	head, tail []wire.StoryLine
	next       int // ring position in tail
	dropped    int
}

func (b *storyBuf) add(l wire.StoryLine) {
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
func (b *storyBuf) lines() ([]wire.StoryLine, string) {
	out := append([]wire.StoryLine{}, b.head...)
	if b.dropped == 0 {
		return append(out, b.tail...), ""
	}
	cut := fmt.Sprintf("%d timeline lines between line %d and the last %d were left out (max_lines %d)",
		b.dropped, len(b.head), len(b.tail), b.max)
	out = append(out, wire.StoryLine{At: b.tail[b.next].At, Text: fmt.Sprintf("… %d lines left out …", b.dropped)})
	out = append(out, b.tail[b.next:]...)
	return append(out, b.tail[:b.next]...), cut
}

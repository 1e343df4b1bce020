package frontend

import (
	"errors"
	"strconv"
	"strings"
)

// episodePos is a position in an eval's episode log: the segment (the run that recorded the
// episodes; 1 is the job's first run) and the offset in it. The log only grows at its end and a
// segment keeps its order once written, so a position names the same episode for the job's
// whole life: list_episodes' pages stay stable while the job runs.
type episodePos struct {
	seg, off int
}

// episodePosPrefix versions the page token inside list_episodes' sealed cursor.
const episodePosPrefix = "ep1:"

// episodePosMax bounds both numbers: far beyond any eval (20,000 episodes by default).
const episodePosMax = 1 << 30

// token is the position as the page token of a sealed cursor (handle.Cursor.PageToken).
func (p episodePos) token() []byte {
	return []byte(episodePosPrefix + strconv.Itoa(p.seg) + ":" + strconv.Itoa(p.off))
}

var errEpisodePos = errors.New("not an episode position")

// parseEpisodePos reads a page token made by token: "ep1:<seg>:<off>", both decimal without
// sign or leading zeros, within 0..episodePosMax. Only a cursor this service sealed reaches it,
// but it is strict all the same.
func parseEpisodePos(b []byte) (episodePos, error) {
	s, ok := strings.CutPrefix(string(b), episodePosPrefix)
	if !ok {
		return episodePos{}, errEpisodePos
	}
	a, c, ok := strings.Cut(s, ":")
	if !ok {
		return episodePos{}, errEpisodePos
	}
	seg, err1 := parsePosNumber(a)
	off, err2 := parsePosNumber(c)
	if err1 != nil || err2 != nil {
		return episodePos{}, errEpisodePos
	}
	return episodePos{seg: seg, off: off}, nil
}

func parsePosNumber(s string) (int, error) {
	if s == "" || len(s) > 10 || (len(s) > 1 && s[0] == '0') {
		return 0, errEpisodePos
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, errEpisodePos
		}
		n = n*10 + int(c-'0')
	}
	if n > episodePosMax {
		return 0, errEpisodePos
	}
	return n, nil
}

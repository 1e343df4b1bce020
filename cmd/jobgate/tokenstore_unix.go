//go:build unix

package main

import (
	"io/fs"
	"os"
	"syscall"
)

// openNoFollow: tokens.json itself must not be a symlink (saveTokens would replace the link
// rather than write where it points, and a planted link could make commands use tokens from
// elsewhere).
const openNoFollow = syscall.O_NOFOLLOW

// foreignOwner reports whether fi belongs to another user than the one running jobgate.
func foreignOwner(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) != os.Geteuid()
}

//go:build !unix

package main

import "io/fs"

// Outside unix there is no O_NOFOLLOW and no owner in the mode bits: the store relies on
// the user profile's ACLs there.
const openNoFollow = 0

func foreignOwner(fs.FileInfo) bool { return false }

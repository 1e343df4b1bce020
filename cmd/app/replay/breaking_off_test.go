//go:build !jobgate_breaking_change

package replay

const breakingBuild = false

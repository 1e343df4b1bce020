//go:build !jobgate_breaking_change

package workflows

// breakingChange is false in every real build. See breaking_on.go.
const breakingChange = false

//go:build jobgate_breaking_change

package workflows

// breakingChange is true only in binaries built with -tags jobgate_breaking_change. The deploy and
// replay tests build such a binary to stand for a release that changed workflow code without a
// workflow.GetVersion gate: every job's first command becomes a timer, so replaying a history
// recorded by a normal build fails with a non-determinism error at its first command.
const breakingChange = true

//go:build jobgate_breaking_change

package app

const breakingBuild = true

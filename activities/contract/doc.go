// Package contract is what the activities promise their callers, with no side effect of its
// own: the activity names workflows execute them by and their inputs and results (episodes,
// export plan, parts, manifest, notifications), the records they leave behind (the episode
// log's lines, the export manifest) and how to read them, the error types they end with, and
// the catalogs both sides read (suites, datasets, export formats, Duration).
//
// It exists so that workflows (deterministic code) and the frontend (the MCP edge) can share
// these types without linking what the activities do: package activities imports this one,
// never the reverse. The frontend reads artifacts through [ArtifactReader], which
// activities.ArtifactStore implements.
//
// It must never import a SQL driver (pgx, modernc.org/sqlite, database/sql), a blob driver
// (gocloud.dev), the Temporal SDK, or any jobgate package but authz: everything under
// frontend/ and workflows/ links it.
package contract

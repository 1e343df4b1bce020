package contract

// Names workflows execute the activities by (workflow.ExecuteActivity with a name, not a method
// value of *activities.Activities, so package workflows needs only this package, not the one
// that links the SQL drivers). Each is the name of the *activities.Activities method a worker
// registers under it (workflows.Kind.Register; activities' TestActivityNamesAreMethods checks
// them). Part of history: a rename breaks the replay of every recorded job.
const (
	RunEpisodeActivityName     = "RunEpisode"
	WriteEpisodesActivityName  = "WriteEpisodes"
	PlanExportActivityName     = "PlanExport"
	ExportPartActivityName     = "ExportPart"
	FinalizeExportActivityName = "FinalizeExport"
	DeleteExportActivityName   = "DeleteExport"
	DeleteEpisodesActivityName = "DeleteEpisodes"
	FixtureTextActivityName    = "FixtureText"
)

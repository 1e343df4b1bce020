package wire

// list_episodes page sizes (CONTRACT.md): as list_jobs'.
const (
	EpisodesPageSizeDefault = ListPageSizeDefault
	EpisodesPageSizeMax     = ListPageSizeMax
)

// Episode is one finished episode of an eval, as list_episodes shows it and as one line of
// the JSON Lines file get_eval's episodes_url serves (the same fields in the same order).
type Episode struct {
	Index       int      `json:"index" jsonschema:"the episode's index in the run, 0-based"`
	OperationID string   `json:"operation_id" jsonschema:"the episode's operation ID: its idempotency key at commands and receivers"`
	Status      string   `json:"status" jsonschema:"passed (scored at or above the suite's pass threshold), failed (scored below it, or the suite reported a failure) or errored (no verdict: timeout, crash, rejection, retries exhausted)"`
	Score       *float64 `json:"score,omitempty" jsonschema:"the score the episode returned; absent when it returned none"`
	Attempts    int      `json:"attempts" jsonschema:"attempts the episode took, retries included"`
	DurationMS  int64    `json:"duration_ms" jsonschema:"milliseconds from scheduling to the outcome, retries and backoff included"`
	Error       string   `json:"error,omitempty" jsonschema:"why it failed or errored, at most 512 bytes; absent when it returned a score"`
	Cost        *float64 `json:"cost,omitempty" jsonschema:"what the episode reported it cost, in the suite's cost_unit (get_eval's cost_unit); absent when it reported none"`
}

// ListEpisodesOut is list_episodes' result.
type ListEpisodesOut struct {
	Episodes   []Episode `json:"episodes" jsonschema:"the page's episodes in the order they finished; every episode appears exactly once across pages"`
	NextCursor string    `json:"next_cursor,omitempty" jsonschema:"pass as cursor (with the same handle, status and page_size) for the next page; while the job runs it is also given at the end of what has finished so far, to read later episodes with. Absent once complete"`
	Complete   bool      `json:"complete" jsonschema:"true when the job has ended and this page reaches its last episode"`
}

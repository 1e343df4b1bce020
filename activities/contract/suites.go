package contract

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jobgate/jobgate/authz"
)

// SuiteKind says how a suite runs an episode.
type SuiteKind string

const (
	// SuiteDemo simulates an episode: it sleeps params.episode_ms while heartbeating and fails
	// with probability params.fail_rate. Outcomes are a pure function of the operation ID, so a
	// retried episode reports what the first attempt would have.
	SuiteDemo SuiteKind = "demo"
	// SuiteCommand runs a configured command per episode and reads a JSON score from its stdout.
	SuiteCommand SuiteKind = "command"
	// SuiteHTTP POSTs each episode to a receiver with an Idempotency-Key (the operation ID) and
	// reconciles an uncertain attempt with a GET before sending again (activities/README.md "HTTP suites").
	SuiteHTTP SuiteKind = "http"
)

// Defaults for suite fields left zero in a catalog file.
const (
	ApprovalThresholdDemo   = 100
	PassThresholdDefault    = 0.5
	EpisodeTimeoutDefault   = 10 * time.Minute
	HeartbeatTimeoutDefault = 10 * time.Second
	MaxAttemptsDefault      = 3
	MaxEpisodesDefault      = 20000
	MaxConcurrencyDefault   = 64
	ApprovalTimeoutDefault  = 24 * time.Hour
	RequestTimeoutDefault   = 30 * time.Second
	EpisodeRetentionDefault = 30 * 24 * time.Hour

	// DemoEpisodeMSDefault and DemoFailRateDefault are the demo suite's params defaults (CONTRACT.md).
	DemoEpisodeMSDefault = 1000
	DemoFailRateDefault  = 0.05
	demoEpisodeMSMax     = 600_000
	// DemoCostUnit is the demo suite's cost unit: with params.cost its episodes report a cost.
	DemoCostUnit   = "usd"
	paramsMaxBytes = 4096
)

// Suite is one configured eval suite. Callers only name it; everything else is server-side.
type Suite struct {
	Name string    `json:"name"`
	Kind SuiteKind `json:"kind"`
	// Command is argv for SuiteCommand. Its environment is an allow-list, never the worker's
	// whole environment (commands are caller-influenced code): PATH, HOME, LANG, LC_ALL and TZ as
	// the worker has them, the variables Env names, and the episode's JOBGATE_* variables.
	Command []string `json:"command,omitempty"`
	// Env names further worker environment variables a command suite's episodes receive (e.g.
	// ["OPENAI_API_KEY"]): names only, the values are the worker's; a name the worker lacks is
	// left unset. No JOBGATE_* names (the worker's own settings). Defaults to none.
	Env []string `json:"env,omitempty"`
	// Dir is the command's working directory. Defaults to the worker's.
	Dir string `json:"dir,omitempty"`
	// URL is the receiver's episodes endpoint for SuiteHTTP: absolute http(s), no credentials,
	// query or fragment. Episodes are POSTed to it; GET URL/<escaped key> reconciles.
	URL string `json:"url,omitempty"`
	// RequestTimeout bounds one HTTP request of SuiteHTTP. Defaults to 30 seconds.
	RequestTimeout Duration `json:"request_timeout,omitempty"`
	// ApprovalThreshold: runs of more episodes than this wait for approval first. 0 never asks.
	ApprovalThreshold int `json:"approval_threshold"`
	// Approver says who may answer the approval. Defaults to "owner".
	Approver authz.Approver `json:"approver,omitempty"`
	// PassThreshold: an episode passes when score >= it. Defaults to 0.5.
	PassThreshold float64 `json:"pass_threshold,omitempty"`
	// EpisodeTimeout bounds one attempt. Defaults to 10 minutes.
	EpisodeTimeout Duration `json:"episode_timeout,omitempty"`
	// HeartbeatTimeout: an attempt silent this long is presumed dead and retried. Defaults to 10s.
	HeartbeatTimeout Duration `json:"heartbeat_timeout,omitempty"`
	// MaxAttempts per episode, retries included. Defaults to 3.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// MaxEpisodes a caller may ask for. Defaults to 20000.
	MaxEpisodes int `json:"max_episodes,omitempty"`
	// MaxConcurrency a caller may ask for. Defaults to 64.
	MaxConcurrency int `json:"max_concurrency,omitempty"`
	// ApprovalTimeout: an unanswered approval fails the job after this long. Defaults to 24 hours.
	ApprovalTimeout Duration `json:"approval_timeout,omitempty"`
	// EpisodeRetention is how long a finished eval's episode log (list_episodes, episodes_url,
	// the job page's pictures) is kept: then its run's retention child deletes it, as an
	// export's artifact is deleted after its dataset's retention. Recorded in each job's input
	// when it starts. Defaults to 30 days.
	EpisodeRetention Duration `json:"episode_retention,omitempty"`
	// TaskQueue is the Temporal task queue this suite's episodes are dispatched to, so they can
	// run on workers of their own (`jobgate worker --kinds eval --task-queue <it>`) that hold no
	// dataset or artifact credentials. Recorded in each job's input when it starts. Defaults to
	// empty: the job's own task queue (--task-queue of serve and worker).
	TaskQueue string `json:"task_queue,omitempty"`
	// CostUnit is the unit the suite's episodes report their cost in ("usd", "tokens"; 1-16 of
	// [a-z0-9_]). Empty: the suite reports no cost, and a start with budget.max_cost is refused.
	// The demo suite's is "usd".
	CostUnit string `json:"cost_unit,omitempty"`
	// MaxEpisodeCost is the most one episode can cost (in CostUnit): a budget schedules an
	// episode only when this much still fits. 0: unknown, and the budget uses the largest cost
	// seen so far instead (overshoot then bounded by the episodes in flight). The demo suite's
	// is its params.cost.
	MaxEpisodeCost float64 `json:"max_episode_cost,omitempty"`
}

// Catalog holds suites by name.
type Catalog map[string]Suite

var (
	suiteNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)
	// envNameRE is a POSIX environment variable name.
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	// taskQueueRE keeps queue names printable and unambiguous in flags, logs and the Web UI.
	taskQueueRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:@/-]{0,199}$`)
	costUnitRE  = regexp.MustCompile(`^[a-z0-9_]{1,16}$`)
)

// envNamesMax bounds a suite's env list.
const envNamesMax = 64

// DefaultCatalog has the demo suite the dev stack always offers (CONTRACT.md).
func DefaultCatalog() Catalog {
	c := Catalog{}
	c.add(Suite{Name: "demo", Kind: SuiteDemo, ApprovalThreshold: ApprovalThresholdDemo, CostUnit: DemoCostUnit})
	return c
}

func (c Catalog) add(s Suite) {
	if s.Approver == authz.ApproverNone {
		s.Approver = authz.ApproverOwner
	}
	s.PassThreshold = cmp.Or(s.PassThreshold, PassThresholdDefault)
	s.EpisodeTimeout = cmp.Or(s.EpisodeTimeout, Duration(EpisodeTimeoutDefault))
	s.HeartbeatTimeout = cmp.Or(s.HeartbeatTimeout, Duration(HeartbeatTimeoutDefault))
	s.MaxAttempts = cmp.Or(s.MaxAttempts, MaxAttemptsDefault)
	s.MaxEpisodes = cmp.Or(s.MaxEpisodes, MaxEpisodesDefault)
	s.MaxConcurrency = cmp.Or(s.MaxConcurrency, MaxConcurrencyDefault)
	s.ApprovalTimeout = cmp.Or(s.ApprovalTimeout, Duration(ApprovalTimeoutDefault))
	s.EpisodeRetention = cmp.Or(s.EpisodeRetention, Duration(EpisodeRetentionDefault))
	if s.Kind == SuiteHTTP && s.RequestTimeout == 0 {
		s.RequestTimeout = Duration(RequestTimeoutDefault)
	}
	c[s.Name] = s
}

// Add validates s, fills defaults and adds it (replacing a suite of the same name).
func (c Catalog) Add(s Suite) error {
	if !suiteNameRE.MatchString(s.Name) {
		return fmt.Errorf("suite name %q: want 1-63 of [a-z0-9_.-]", s.Name)
	}
	for _, check := range []func(Suite) error{validateKind, validateEnvNames, validateTaskQueue, validateCost, validateLimits} {
		if err := check(s); err != nil {
			return fmt.Errorf("suite %q: %w", s.Name, err)
		}
	}
	c.add(s)
	return nil
}

// validateKind checks the kind and the fields that belong to it (a command's command, an http
// suite's url and request_timeout).
func validateKind(s Suite) error {
	switch s.Kind {
	case SuiteDemo:
	case SuiteCommand:
		if len(s.Command) == 0 || s.Command[0] == "" {
			return errors.New("kind command needs a command")
		}
	case SuiteHTTP:
		if err := validateEpisodeURL(s.URL); err != nil {
			return err
		}
		if s.RequestTimeout < 0 {
			return errors.New("request_timeout must not be negative")
		}
		episode := s.EpisodeTimeout.D()
		if episode == 0 {
			episode = EpisodeTimeoutDefault
		}
		if s.RequestTimeout.D() > episode {
			return fmt.Errorf("request_timeout %s exceeds episode_timeout %s", s.RequestTimeout.D(), episode)
		}
	default:
		return fmt.Errorf("kind %q is not demo, command or http", s.Kind)
	}
	if s.Kind != SuiteHTTP && (s.URL != "" || s.RequestTimeout != 0) {
		return errors.New("url and request_timeout apply only to kind http")
	}
	return nil
}

// validateTaskQueue checks a suite's own episode task queue, if it names one.
func validateTaskQueue(s Suite) error {
	if s.TaskQueue != "" && (!taskQueueRE.MatchString(s.TaskQueue) || strings.HasPrefix(s.TaskQueue, "/_sys/")) {
		return fmt.Errorf("task_queue %q: want 1-200 of [A-Za-z0-9_.:@/-], starting with a letter or digit", truncateName(s.TaskQueue))
	}
	return nil
}

// validateCost checks cost_unit and max_episode_cost (which needs a unit).
func validateCost(s Suite) error {
	if s.CostUnit != "" && !costUnitRE.MatchString(s.CostUnit) {
		return fmt.Errorf("cost_unit %q: want 1-16 of [a-z0-9_], like usd or tokens", truncateName(s.CostUnit))
	}
	if msg := CheckCost(s.MaxEpisodeCost); msg != "" {
		return fmt.Errorf("max_episode_cost: %s", strings.TrimPrefix(msg, "cost "))
	}
	if s.MaxEpisodeCost > 0 && s.CostUnit == "" {
		return errors.New("max_episode_cost needs a cost_unit")
	}
	return nil
}

// validateLimits checks the approver and the numeric limits.
func validateLimits(s Suite) error {
	switch s.Approver {
	case authz.ApproverNone, authz.ApproverOwner, authz.ApproverApprover:
	default:
		return fmt.Errorf("approver %q is not owner or approver", s.Approver)
	}
	if s.ApprovalThreshold < 0 || s.MaxAttempts < 0 || s.MaxEpisodes < 0 || s.MaxConcurrency < 0 {
		return errors.New("negative limit")
	}
	if s.EpisodeRetention < 0 {
		return errors.New("episode_retention must not be negative")
	}
	if s.PassThreshold < 0 || s.PassThreshold > 1 {
		return errors.New("pass_threshold must be within 0..1")
	}
	return nil
}

// validateEnvNames checks a suite's env list: command suites only, variable names (not
// NAME=value), no JOBGATE_* and no repeats.
func validateEnvNames(s Suite) error {
	if s.Env == nil {
		return nil
	}
	if s.Kind != SuiteCommand {
		return errors.New("env applies only to kind command")
	}
	if len(s.Env) > envNamesMax {
		return fmt.Errorf("env: at most %d names", envNamesMax)
	}
	seen := make(map[string]bool, len(s.Env))
	for i, n := range s.Env {
		switch {
		case !envNameRE.MatchString(n):
			return fmt.Errorf("env[%d] %q: want a variable name like OPENAI_API_KEY (letters, digits, _; not NAME=value)", i, truncateName(n))
		case strings.HasPrefix(strings.ToUpper(n), "JOBGATE_"):
			return fmt.Errorf("env[%d] %q: JOBGATE_* variables are the worker's own settings; episodes get theirs from jobgate", i, n)
		case seen[n]:
			return fmt.Errorf("env[%d] %q: named twice", i, n)
		}
		seen[n] = true
	}
	return nil
}

// truncateName shortens a rejected value quoted in an error.
func truncateName(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// validateEpisodeURL accepts an absolute http or https URL with a host and no credentials,
// query or fragment: the reconcile URL is this one plus one escaped path segment.
func validateEpisodeURL(raw string) error {
	if raw == "" {
		return fmt.Errorf("kind http needs a url")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("url: %w", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("url %q: scheme must be http or https", raw)
	case u.Host == "" || u.Opaque != "":
		return fmt.Errorf("url %q: must be absolute, like http://host/episodes", raw)
	case u.User != nil:
		return fmt.Errorf("url: must not carry credentials")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(raw, "#"):
		return fmt.Errorf("url %q: must not have a query or fragment", raw)
	}
	return nil
}

// LoadCatalog reads a JSON file {"suites":[...]} on top of DefaultCatalog.
// An empty path gives DefaultCatalog.
func LoadCatalog(path string) (Catalog, error) {
	if path == "" {
		return DefaultCatalog(), nil
	}
	return parseFile("suites", path, ParseCatalog)
}

// ParseCatalog reads a catalog document {"suites":[...]} on top of DefaultCatalog. Unknown
// fields and trailing data are refused, so a misspelt setting is an error, not a default.
func ParseCatalog(b []byte) (Catalog, error) {
	c := DefaultCatalog()
	var f struct {
		Suites []Suite `json:"suites"`
	}
	if err := decodeStrict(b, &f); err != nil {
		return nil, err
	}
	// Durations are strings in config ("90s"): a number, which Duration reads for recorded
	// histories, would be nanoseconds here.
	var raws struct {
		Suites []json.RawMessage `json:"suites"`
	}
	if err := json.Unmarshal(b, &raws); err != nil {
		return nil, err
	}
	for i, raw := range raws.Suites {
		if err := configDurations(raw, "request_timeout", "episode_timeout", "heartbeat_timeout", "approval_timeout"); err != nil {
			return nil, fmt.Errorf("suites[%d]: %w", i, err)
		}
	}
	for _, s := range f.Suites {
		if err := c.Add(s); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// TaskQueues lists the distinct non-empty task queues suites name, sorted.
func (c Catalog) TaskQueues() []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range c {
		if s.TaskQueue != "" && !seen[s.TaskQueue] {
			seen[s.TaskQueue] = true
			out = append(out, s.TaskQueue)
		}
	}
	sort.Strings(out)
	return out
}

// WorstEpisodeCost is the most one episode of s can cost with the normalized params: the
// demo's params.cost, else the configured max_episode_cost (0: unknown).
func (s Suite) WorstEpisodeCost(params map[string]any) float64 {
	if s.Kind == SuiteDemo {
		c, _ := params["cost"].(float64)
		return c
	}
	return s.MaxEpisodeCost
}

// Names lists suite names, sorted.
func (c Catalog) Names() []string { return slices.Sorted(maps.Keys(c)) }

// ParamError names the offending params field.
type ParamError struct {
	Field  string
	Reason string
}

func (e *ParamError) Error() string { return e.Field + ": " + e.Reason }

// NormalizeParams validates a caller's params for this suite and fills defaults, so that equal
// requests hash equal whether or not defaults were spelled out.
func (s Suite) NormalizeParams(p map[string]any) (map[string]any, error) {
	if p == nil {
		p = map[string]any{}
	}
	if b, err := json.Marshal(p); err != nil || len(b) > paramsMaxBytes {
		return nil, &ParamError{"params", fmt.Sprintf("must be a JSON object of at most %d bytes", paramsMaxBytes)}
	}
	if s.Kind != SuiteDemo {
		return p, nil
	}
	out := map[string]any{"episode_ms": float64(DemoEpisodeMSDefault), "fail_rate": DemoFailRateDefault}
	for k, v := range p {
		f, ok := v.(float64)
		switch k {
		case "episode_ms":
			if !ok || f != math.Trunc(f) || f < 0 || f > demoEpisodeMSMax {
				return nil, &ParamError{"params.episode_ms", fmt.Sprintf("must be a whole number of milliseconds within 0..%d", demoEpisodeMSMax)}
			}
		case "fail_rate":
			if !ok || math.IsNaN(f) || f < 0 || f > 1 {
				return nil, &ParamError{"params.fail_rate", "must be a number within 0..1"}
			}
		case "cost":
			// Not defaulted: a run without it reports no cost, and its arguments' digest is
			// what it was before costs existed.
			if !ok || CheckCost(f) != "" {
				return nil, &ParamError{"params.cost", fmt.Sprintf("must be a number within 0..%g (the most one episode costs, in usd)", float64(CostLimit))}
			}
		default:
			return nil, &ParamError{"params." + k, "unknown parameter for the demo suite (known: episode_ms, fail_rate, cost)"}
		}
		out[k] = f
	}
	return out, nil
}

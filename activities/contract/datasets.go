package contract

// The dataset catalog: Dataset and its columns, config digest and defaults, strict parsing
// and validation of a catalog file, and the demo catalog.

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Dataset drivers and key types.
const (
	DriverSQLite   = "sqlite"
	DriverPostgres = "postgres"

	KeyTypeInteger = "integer"
	KeyTypeText    = "text"
)

// Approval surfaces a dataset may require (Dataset.ApprovalSurfaces): the human ones.
const (
	ApprovalSurfacePage = "page"
	ApprovalSurfaceApp  = "app"
)

// Defaults for dataset fields left zero in a catalog file.
const (
	MaxRowsDefault   = 10_000_000
	RetentionDefault = 7 * 24 * time.Hour
)

// Column is one exportable column of a dataset.
type Column struct {
	Name string `json:"name"`
	// Sensitive columns are left out unless asked for by name, and an export that includes one
	// needs an approver who is not the job's owner (four eyes), unless AllowSelfApproval.
	Sensitive bool `json:"sensitive,omitempty"`
}

// Dataset is one configured export source. Callers only name it; everything else, above all
// which table and columns can be read, is server-side.
type Dataset struct {
	Name string `json:"name"`
	// Driver is "sqlite" (default) or "postgres" (pgx).
	Driver string `json:"driver"`
	// DSN is a file path or "file:" URI for sqlite (always opened read-only: mode=ro and
	// query_only, whatever the URI asks) or a pgx URL/DSN for postgres.
	DSN          string `json:"dsn"`
	Table        string `json:"table"`
	TenantColumn string `json:"tenant_column"`
	// KeyColumn is unique within the table; exports page through it (keyset paging). Its
	// values travel in workflow history as part boundaries, so it must not be sensitive.
	KeyColumn string `json:"key_column"`
	// KeyType is "integer" (default) or "text".
	KeyType string   `json:"key_type,omitempty"`
	Columns []Column `json:"columns"`
	// MaxRows bounds one tenant's export. Defaults to MaxRowsDefault.
	MaxRows int `json:"max_rows,omitempty"`
	// AllowSelfApproval turns four eyes off for this dataset: the owner may approve an export
	// of sensitive columns.
	AllowSelfApproval bool `json:"allow_self_approval,omitempty"`
	// ApprovalSurfaces, when set, are the only surfaces an approval of a sensitive scope of this
	// dataset may be given on: ApprovalSurfacePage (jobgate's /approvals pages, a signed-in
	// person) and ApprovalSurfaceApp (the MCP Apps approval card, inside the person's chat
	// host). Every bearer-token answer (resume_*, MRTR, tasks/update, the CLI) is then refused
	// with forbidden and the page's link. Empty: any surface.
	ApprovalSurfaces []string `json:"approval_surfaces,omitempty"`
	// ApprovalTimeout: an unanswered approval fails the job after this long. Defaults to 24h.
	ApprovalTimeout Duration `json:"approval_timeout,omitempty"`
	// Retention is how long a finished artifact stays downloadable. Defaults to 7 days.
	Retention Duration `json:"retention,omitempty"`
	// MaxRowsPerSecond throttles each export part's reads, so an export never hammers the
	// source database. 0 (the default) does not throttle. Not part of the config digest: it
	// changes how fast, not what is read.
	MaxRowsPerSecond int `json:"max_rows_per_second,omitempty"`
}

// WithDefaults fills the zero fields that have defaults, so a dataset built in code and the
// same dataset read from a file digest alike.
func (d Dataset) WithDefaults() Dataset {
	d.Driver = cmp.Or(d.Driver, DriverSQLite)
	d.KeyType = cmp.Or(d.KeyType, KeyTypeInteger)
	d.MaxRows = cmp.Or(d.MaxRows, MaxRowsDefault)
	d.ApprovalTimeout = cmp.Or(d.ApprovalTimeout, Duration(ApprovalTimeoutDefault))
	d.Retention = cmp.Or(d.Retention, Duration(RetentionDefault))
	return d
}

// ConfigDigest is "sha256:<hex>" of the canonical JSON of what decides which rows and columns
// an export can read and how they are classified: driver, table, tenant and key columns, key
// type, the columns with their sensitivity (catalog order), max_rows, allow_self_approval and
// approval_surfaces (only when set, so catalogs without it digest as they always did).
// An approval is given for this digest; any change to those fields makes the workflow ask
// again. The DSN is left out on purpose: credentials rotate without changing what is read,
// and a digest over them would leak nothing but churn approvals. Timeouts and retention are
// left out too: they change how long things last, not what is disclosed.
func (d Dataset) ConfigDigest() string {
	d = d.WithDefaults()
	type col struct {
		Name      string `json:"name"`
		Sensitive bool   `json:"sensitive"`
	}
	canon := struct {
		Driver            string   `json:"driver"`
		Table             string   `json:"table"`
		TenantColumn      string   `json:"tenant_column"`
		KeyColumn         string   `json:"key_column"`
		KeyType           string   `json:"key_type"`
		Columns           []col    `json:"columns"`
		MaxRows           int      `json:"max_rows"`
		AllowSelfApproval bool     `json:"allow_self_approval"`
		ApprovalSurfaces  []string `json:"approval_surfaces,omitempty"`
	}{d.Driver, d.Table, d.TenantColumn, d.KeyColumn, d.KeyType, make([]col, 0, len(d.Columns)), d.MaxRows, d.AllowSelfApproval,
		d.ApprovalSurfaces}
	for _, c := range d.Columns {
		canon.Columns = append(canon.Columns, col(c))
	}
	digest, _ := JSONDigest(canon) // plain strings, ints and bools: cannot fail
	return digest
}

// DefaultColumns are the non-sensitive columns in catalog order: what an export reads when
// the caller names no columns.
func (d Dataset) DefaultColumns() []string {
	var out []string
	for _, c := range d.Columns {
		if !c.Sensitive {
			out = append(out, c.Name)
		}
	}
	return out
}

// Column finds a column by its exact name.
func (d Dataset) Column(name string) (Column, bool) {
	for _, c := range d.Columns {
		if c.Name == name {
			return c, true
		}
	}
	return Column{}, false
}

// AnySensitive says whether any of cols is a sensitive column. Unknown names are not.
func (d Dataset) AnySensitive(cols []string) bool {
	for _, n := range cols {
		if c, ok := d.Column(n); ok && c.Sensitive {
			return true
		}
	}
	return false
}

// Datasets holds datasets by name.
type Datasets map[string]Dataset

// Names lists dataset names, sorted.
func (c Datasets) Names() []string { return slices.Sorted(maps.Keys(c)) }

var (
	datasetNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	// identRE is deliberately narrower than SQL allows: identifiers are double-quoted in every
	// statement, and this keeps a quote or anything else odd out of them entirely.
	identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)
)

// ParseDatasets reads a catalog {"datasets":[...]} strictly (unknown fields are errors),
// validates every dataset and fills defaults. Errors name the dataset and the field.
func ParseDatasets(b []byte) (Datasets, error) {
	var f struct {
		Datasets []json.RawMessage `json:"datasets"`
	}
	if err := decodeStrict(b, &f); err != nil {
		return nil, fmt.Errorf("datasets: %w", err)
	}
	c := Datasets{}
	for i, raw := range f.Datasets {
		var d Dataset
		err := decodeStrict(raw, &d)
		// A bad duration (or a number: config files write "48h") is reported by its field.
		if derr := configDurations(raw, "approval_timeout", "retention"); derr != nil {
			err = derr
		}
		if err == nil {
			err = d.Validate()
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", datasetRef(i, raw), err)
		}
		if _, dup := c[d.Name]; dup {
			return nil, fmt.Errorf("dataset %q: name: configured twice", d.Name)
		}
		c[d.Name] = d.WithDefaults()
	}
	return c, nil
}

// decodeStrict decodes one JSON value into v refusing unknown fields and trailing data, so a
// misspelt setting in a catalog file is an error, not a default.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// datasetRef names a dataset in an error: by name when it has one, else by position.
func datasetRef(i int, raw json.RawMessage) string {
	var n struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(raw, &n) == nil && n.Name != "" {
		return fmt.Sprintf("dataset %q", n.Name)
	}
	return fmt.Sprintf("datasets[%d]", i)
}

// Validate checks what ParseDatasets checks of one dataset (names, key, columns, limits):
// activities call it for datasets built in code, so only a valid identifier reaches SQL.
func (d Dataset) Validate() error {
	if d.MaxRowsPerSecond < 0 {
		return fmt.Errorf("max_rows_per_second %d: must be 0 (no limit) or more", d.MaxRowsPerSecond)
	}
	if !datasetNameRE.MatchString(d.Name) {
		return fmt.Errorf("name %q: want 1-63 of [a-z0-9_-], starting with a letter or digit", d.Name)
	}
	switch d.Driver {
	case "", DriverSQLite, DriverPostgres:
	default:
		return fmt.Errorf("driver %q: want %q or %q", d.Driver, DriverSQLite, DriverPostgres)
	}
	if d.DSN == "" {
		return errors.New("dsn: required")
	}
	ident := func(field, v string) error {
		if !identRE.MatchString(v) {
			return fmt.Errorf("%s %q: want an identifier matching %s", field, v, identRE)
		}
		return nil
	}
	if err := ident("table", d.Table); err != nil {
		return err
	}
	if err := ident("tenant_column", d.TenantColumn); err != nil {
		return err
	}
	if err := ident("key_column", d.KeyColumn); err != nil {
		return err
	}
	switch d.KeyType {
	case "", KeyTypeInteger, KeyTypeText:
	default:
		return fmt.Errorf("key_type %q: want %q or %q", d.KeyType, KeyTypeInteger, KeyTypeText)
	}
	if len(d.Columns) == 0 {
		return errors.New("columns: at least one column is required")
	}
	seen := map[string]bool{}
	for i, c := range d.Columns {
		if err := ident(fmt.Sprintf("columns[%d].name", i), c.Name); err != nil {
			return err
		}
		// SQLite folds identifier case even when quoted; two names differing only in case
		// would read the same column there.
		if low := strings.ToLower(c.Name); seen[low] {
			return fmt.Errorf("columns[%d].name %q: listed twice", i, c.Name)
		} else {
			seen[low] = true
		}
		if c.Name == d.KeyColumn && c.Sensitive {
			return fmt.Errorf("columns[%d].sensitive: the key column %q cannot be sensitive: its values are part boundaries in workflow history", i, c.Name)
		}
	}
	if d.MaxRows < 0 {
		return fmt.Errorf("max_rows %d: must not be negative", d.MaxRows)
	}
	for i, s := range d.ApprovalSurfaces {
		if s != ApprovalSurfacePage && s != ApprovalSurfaceApp {
			return fmt.Errorf("approval_surfaces[%d] %q: want %q or %q", i, s, ApprovalSurfacePage, ApprovalSurfaceApp)
		}
		if slices.Index(d.ApprovalSurfaces, s) != i {
			return fmt.Errorf("approval_surfaces[%d] %q: listed twice", i, s)
		}
	}
	if d.ApprovalTimeout < 0 {
		return errors.New("approval_timeout: must not be negative")
	}
	if d.Retention < 0 {
		return errors.New("retention: must not be negative")
	}
	return nil
}

// LoadDatasets reads a catalog file. An empty path gives an empty catalog.
func LoadDatasets(path string) (Datasets, error) {
	if path == "" {
		return Datasets{}, nil
	}
	return parseFile("datasets", path, ParseDatasets)
}

// parseFile reads a catalog file (what: "suites", "datasets") and parses it; errors say which
// file, and a parse error the file's path.
func parseFile[C any](what, path string, parse func([]byte) (C, error)) (C, error) {
	var zero C
	b, err := os.ReadFile(path)
	if err != nil {
		return zero, fmt.Errorf("%s file: %w", what, err)
	}
	c, err := parse(b)
	if err != nil {
		return zero, fmt.Errorf("%s file %s: %w", what, path, err)
	}
	return c, nil
}

// DemoDatasets is the catalog of the dev stack: "customers" over the demo SQLite database
// that SeedDemoDB creates.
func DemoDatasets(sqlitePath string) Datasets {
	d := Dataset{
		Name:         "customers",
		Driver:       DriverSQLite,
		DSN:          sqlitePath,
		Table:        "customers",
		TenantColumn: "tenant",
		KeyColumn:    "id",
		KeyType:      KeyTypeInteger,
		Columns: []Column{
			{Name: "id"}, {Name: "name"}, {Name: "email", Sensitive: true},
			{Name: "country"}, {Name: "plan"}, {Name: "signup_date"},
		},
	}
	return Datasets{d.Name: d.WithDefaults()}
}

package contract

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a time.Duration written in JSON as a string like "24h0m0s": in config files
// ("90s"), and in workflow inputs and activity results, so the Temporal Web UI shows them
// readably. It is jobgate's one duration type; workflows.Duration is the same type.
//
// It also reads a plain number of nanoseconds: workflow inputs recorded before durations were
// strings carry them, and those histories must replay. Config files may not use that form
// (configDurations refuses it), as "retention": 90 would silently mean 90ns.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var ns int64
	if json.Unmarshal(b, &ns) == nil {
		*d = Duration(ns)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"90s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// configDurations checks the duration fields named keys of the config object raw: each must be
// a string time.ParseDuration reads. The error names the field (Duration's own error cannot:
// it does not know which field it decodes). A raw that is not an object passes: the strict
// decode of the object reports that.
func configDurations(raw json.RawMessage, keys ...string) error {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	for _, k := range keys {
		v, ok := m[k]
		if !ok {
			continue
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return fmt.Errorf("%s: duration must be a string like \"90s\", got %s", k, v)
		}
		if _, err := time.ParseDuration(s); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	return nil
}

package wire

import (
	"encoding/json"
	"testing"
)

// FuzzJSONString: JSONString(raw) is json.Unmarshal of raw into a string, for every value a
// parsed map can hold (and anything else).
func FuzzJSONString(f *testing.F) {
	for _, s := range []string{`"a"`, `"é\u00e9"`, `"\\"`, `"a\"b"`, `"\u0000"`, "\"\x01\"", "\"\xff\"", `null`, `1`, `""`, `"`, ``, `{"a":1}`, `"a" `, `"<&>"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, ok := JSONString(raw)
		var want string
		err := json.Unmarshal(raw, &want)
		if ok != (err == nil) || ok && got != want {
			t.Fatalf("%q: jsonString %q %v, json.Unmarshal %q %v", raw, got, ok, want, err)
		}
	})
}

// The parse the layers in front of the SDK share decodes what the separate decodes did.

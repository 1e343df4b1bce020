package frontend

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jobgate/jobgate/frontend/mcpbody"
	"github.com/jobgate/jobgate/frontend/wire"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// strictBodySeeds are bodies the SDK reads (or might read) otherwise than encoding/json, and the
// plain ones it reads the same; each is also a seed of FuzzStrictBody.
var strictBodySeeds = []struct {
	name, body string
	ok         bool
}{
	{"plain", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_eval","arguments":{"handle":"h"}}}`, true},
	{"spaces around", " \r\n\t{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"} \n", true},
	{"batch", `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]`, true},
	{"escapes and pairs", `{"a":"\u0073tart\ud83d\ude00\n\"","b":[1,-0.5e+3,true,false,null,{}]}`, true},
	{"case-folded keys are not duplicates", `{"name":"start_eval","Name":"get_eval"}`, true},
	{"trailing word", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"start_eval"}} x`, false},
	{"trailing second object", `{"jsonrpc":"2.0","id":1,"method":"ping"}{"jsonrpc":"2.0","id":2,"method":"ping"}`, false},
	{"trailing after batch", `[{"jsonrpc":"2.0","id":1,"method":"ping"}] ]`, false},
	{"trailing vertical tab", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\v", false},
	{"trailing NUL", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\x00", false},
	{"duplicate method", `{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}`, false},
	{"duplicate params", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_eval"},"params":{"name":"start_eval"}}`, false},
	{"duplicate name then null", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"start_eval","name":null}}`, false},
	{"duplicate name escaped", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_eval","na\u006de":"start_eval"}}`, false},
	{"duplicate deep in arguments", `{"params":{"arguments":{"episodes":1,"episodes":1000}}}`, false},
	{"duplicate in batch element", `[{"id":1,"id":2}]`, false},
	{"invalid UTF-8", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"start_\xffeval\"}}", false},
	{"lone high surrogate", `{"a":"\ud800"}`, false},
	{"lone low surrogate", `{"a":"\udc00x"}`, false},
	{"high surrogate then non-low", `{"a":"\ud800\u0041"}`, false},
	{"control character", "{\"a\":\"x\ty\"}", false},
	{"empty", "", false},
	{"only space", "  ", false},
	{"leading zero", `{"id":01}`, false},
	{"bad literal", `{"id":tru}`, false},
	{"too deep", strings.Repeat("[", mcpbody.MaxDepth+1) + strings.Repeat("]", mcpbody.MaxDepth+1), false},
	{"deep enough", strings.Repeat("[", mcpbody.MaxDepth) + strings.Repeat("]", mcpbody.MaxDepth), true},
}

// TestStrictBody: a body is taken only when encoding/json and the SDK's decoder read it the
// same: one value, no trailing bytes, no duplicate keys, valid UTF-8.
func TestStrictBody(t *testing.T) {
	for _, c := range strictBodySeeds {
		err := mcpbody.Parse([]byte(c.body)).Err
		if (err == nil) != c.ok {
			t.Errorf("%s: %q: err %v, want ok=%v", c.name, c.body, err, c.ok)
		}
		if err == nil && !json.Valid([]byte(c.body)) {
			t.Errorf("%s: accepted invalid JSON", c.name)
		}
		if pb := mcpbody.Parse([]byte(c.body)); (pb.Err == nil) != c.ok || (pb.Err != nil && len(pb.Msgs) != 0) {
			t.Errorf("%s: parseBody err %v with %d messages", c.name, pb.Err, len(pb.Msgs))
		}
	}
}

// TestStrictBodyRefusedBeforeScopeCheck: through the whole handler, a body with trailing bytes
// or a duplicate key is 400 with a JSON-RPC parse error, whatever the token may do: the front
// door's answer, so no tool runs.
func TestStrictBodyRefusedBeforeScopeCheck(t *testing.T) {
	fx := newTaskFixture(t)
	for _, c := range strictBodySeeds {
		if c.ok || !strings.Contains(c.body, `"jsonrpc"`) {
			continue
		}
		for _, version := range []string{"2025-06-18", "2026-07-28"} {
			rec := fx.postRaw(t, taskAna, c.body, version)
			var msg struct {
				ID    json.RawMessage
				Error *rpcError
			}
			if rec.Code != 400 || json.Unmarshal(rec.Body.Bytes(), &msg) != nil || msg.Error == nil ||
				msg.Error.Code != jsonrpc.CodeParseError || string(msg.ID) != "null" {
				t.Errorf("%s (%s): %d %s", c.name, version, rec.Code, rec.Body)
			}
		}
	}
}

// FuzzStrictBody: whatever the body, parseBody never panics; a body it takes is valid
// JSON; and when the SDK's own decoder (jsonrpc.DecodeMessage) reads a body the layers in front
// of it take, both read the same method and the same params.name.
func FuzzStrictBody(f *testing.F) {
	for _, c := range strictBodySeeds {
		f.Add([]byte(c.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		pb := mcpbody.Parse(body)
		if pb.Err != nil {
			if len(pb.Msgs) != 0 {
				t.Fatalf("refused body has messages: %q", body)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("took invalid JSON %q", body)
		}
		sameAsPlainDecode(t, body, pb)
		if pb.Batch || len(pb.Msgs) != 1 {
			return
		}
		msg, err := jsonrpc.DecodeMessage(body)
		if err != nil {
			return
		}
		req, ok := msg.(*jsonrpc.Request)
		if !ok {
			return
		}
		pm := &pb.Msgs[0]
		pm.Decode()
		if pm.MethodOK && pm.Method != req.Method {
			t.Fatalf("%q: method %q here, %q in the SDK", body, pm.Method, req.Method)
		}
		var params struct {
			Name string `json:"name"`
		}
		if pm.Params != nil && json.Unmarshal(req.Params, &params) == nil {
			if name, isStr := wire.JSONString(pm.Params["name"]); isStr && name != params.Name {
				t.Fatalf("%q: name %q here, %q in the SDK's params", body, name, params.Name)
			}
		}
	})
}

// sameAsPlainDecode: the members parseBody read in its one pass are what encoding/json reads
// into map[string]json.RawMessage, for every top-level message and its params object.
func sameAsPlainDecode(t *testing.T, body []byte, pb *mcpbody.Body) {
	t.Helper()
	var msgs []map[string]json.RawMessage
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	switch {
	case len(trimmed) > 0 && trimmed[0] == '[':
		var raws []json.RawMessage
		if err := json.Unmarshal(body, &raws); err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		for _, r := range raws {
			var m map[string]json.RawMessage
			_ = json.Unmarshal(r, &m) // not an object: no members
			msgs = append(msgs, m)
		}
	case len(trimmed) > 0 && trimmed[0] == '{':
		var m map[string]json.RawMessage
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		msgs = append(msgs, m)
	}
	if len(msgs) != len(pb.Msgs) || pb.Batch != (len(trimmed) > 0 && trimmed[0] == '[') {
		t.Fatalf("%q: %d messages (batch %v), encoding/json %d", body, len(pb.Msgs), pb.Batch, len(msgs))
	}
	same := func(a, b map[string]json.RawMessage) bool {
		if (a == nil) != (b == nil) || len(a) != len(b) {
			return false
		}
		for k, v := range a {
			if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
				return false
			}
		}
		return true
	}
	for i, m := range msgs {
		var params map[string]json.RawMessage
		if json.Unmarshal(m["params"], &params) != nil {
			params = nil
		}
		if !same(m, pb.Msgs[i].M) || !same(params, pb.Msgs[i].Params) {
			t.Fatalf("%q: message %d: members %q params %q, encoding/json %q %q", body, i, pb.Msgs[i].M, pb.Msgs[i].Params, m, params)
		}
	}
}

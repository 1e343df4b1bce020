package mcpbody

import (
	"encoding/json"

	"github.com/jobgate/jobgate/frontend/wire"
)

// parsedBody is a request body as the layers in front of the SDK read it, parsed once (by
// frontDoor, which puts it in the request context for the handlers behind). Keys are matched
// exactly, as the SDK's decoder does: encoding/json's case-insensitive struct matching would let
// {"name":"start_eval","Name":"get_eval"} pass a check as get_eval while the SDK runs
// start_eval. A body the SDK might read otherwise than encoding/json (parseBody's strict rules: trailing
// bytes, duplicate keys, invalid UTF-8) has err set and no messages, and is refused with 400;
// other unparseable bodies yield no messages and the MCP handler rejects them.
type Body struct {
	Err   error     // why parseBody refused the body; then there are no messages
	Batch bool      // the body is a JSON array
	Msgs  []Message // the top-level messages, one unless batch
}

// parsedMsg is one top-level message: its members and its params' members (parseBody reads
// both), and its method and params.name, each decoded at most once for all the layers that
// look at them.
type Message struct {
	M map[string]json.RawMessage

	decoded  bool
	Method   string                     // "" unless methodOK
	MethodOK bool                       // "method" is present and a JSON string
	Params   map[string]json.RawMessage // nil when absent or not an object
	Name     string                     // params.name when a JSON string, else ""
}

type ContextKey struct{}

// decode decodes the message's method and params.name, once (parseBody split params).
func (pm *Message) Decode() {
	if pm.decoded {
		return
	}
	pm.decoded = true
	pm.Method, pm.MethodOK = wire.JSONString(pm.M["method"])
	pm.Name, _ = wire.JSONString(pm.Params["name"])
}

// toolNames returns the tools a JSON-RPC message (or batch) calls.
func (pb *Body) ToolNames() []string {
	var names []string
	for i := range pb.Msgs {
		pm := &pb.Msgs[i]
		pm.Decode()
		if !pm.MethodOK || pm.Method != "tools/call" {
			continue
		}
		names = append(names, pm.Name)
	}
	return names
}

package frontend

import (
	"encoding/json"

	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/mcpapp"
	"github.com/jobgate/jobgate/frontend/mcpbody"
)

// serveApps adds the MCP Apps surface (frontend/mcpapp): the approval card for the results of
// list_approvals and every kind's get_*, to hosts that declare the extension.
func (f *Frontend) serveApps() {
	carded := []string{"list_approvals"}
	for _, k := range f.Kinds {
		carded = append(carded, "get_"+k.Name)
	}
	f.server.AddReceivingMiddleware(mcpapp.Middleware(carded))
}

// hiddenAppTool: name is the app-only decision tool and no call of it in pb comes from a host
// that declares MCP Apps. Such a host has no such tool (mcpapp answers "unknown tool"), so the
// front door does not check its scopes either: the answer is the one it always was.
func hiddenAppTool(pb *mcpbody.Body, name string) bool {
	if name != jobcore.DecideToolName {
		return false
	}
	for i := range pb.Msgs {
		m := &pb.Msgs[i]
		m.Decode()
		if m.Method != "tools/call" || m.Name != name {
			continue
		}
		var meta map[string]any
		if json.Unmarshal(m.Params["_meta"], &meta) == nil && jobcore.DeclaresApps(meta) {
			return false
		}
	}
	return true
}

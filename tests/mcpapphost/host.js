// A minimal MCP Apps host page for tests/mcpapp_browser_test.go. It is a real host: an
// @modelcontextprotocol/client Client (2026-07-28, declaring io.modelcontextprotocol/ui) talks
// to jobgate's /mcp through the test's proxy on this page's own origin (the proxy adds the
// person's bearer token: neither this page nor the card ever holds it), and ext-apps' own
// AppBridge connects the card, rendered from the ui:// resource in a sandboxed iframe (opaque
// origin, scripts only), to that client. The page calls the tool named by ?tool= with ?args=,
// shows the tool's card with the result and records in window.host what a host would show
// its model (the tools whose visibility includes "model") and what happened.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import {
  AppBridge, PostMessageTransport, getToolUiResourceUri, isToolVisibilityAppOnly, RESOURCE_MIME_TYPE,
} from "@modelcontextprotocol/ext-apps/app-bridge";

const host = (window.host = { state: "starting", log: [] });
const info = { name: "jobgate-test-host", version: "1" };

async function main() {
  const q = new URLSearchParams(location.search);
  const toolName = q.get("tool");
  const args = JSON.parse(q.get("args") || "{}");
  const client = new Client(info, {
    capabilities: { extensions: { "io.modelcontextprotocol/ui": { mimeTypes: [RESOURCE_MIME_TYPE] } } },
    versionNegotiation: { mode: { pin: "2026-07-28" } },
  });
  await client.connect(new StreamableHTTPClientTransport(new URL("mcp", location.href)));
  const { tools } = await client.listTools();
  host.allTools = tools.map((t) => t.name);
  // What this host lists to its model: the extension says a host MUST leave out app-only tools.
  host.modelTools = tools.filter((t) => !isToolVisibilityAppOnly(t)).map((t) => t.name);
  const tool = tools.find((t) => t.name === toolName);
  if (!tool) throw new Error(`no tool ${toolName}`);
  const uri = getToolUiResourceUri(tool);
  if (!uri) throw new Error(`${toolName} names no UI resource`);
  const result = await client.callTool({ name: toolName, arguments: args });
  host.resultMetaKeys = Object.keys(result._meta || {});
  const res = await client.readResource({ uri });
  const card = res.contents[0];
  if (card.mimeType !== RESOURCE_MIME_TYPE) throw new Error(`card type ${card.mimeType}`);
  host.cardCSP = (/http-equiv="Content-Security-Policy" content="([^"]*)"/.exec(card.text) || [])[1] || "";

  const iframe = document.createElement("iframe");
  iframe.setAttribute("sandbox", "allow-scripts");
  iframe.title = "jobgate approval card";
  iframe.style.cssText = "width:100%;border:1px solid #ccc;border-radius:8px;height:200px;display:block";
  // The document is set before the frame enters the page (a frame navigated from about:blank
  // to its srcdoc later is one DevTools cannot evaluate in); the bridge below listens before
  // the frame's scripts can run, which happens in a later task (in another process, even).
  iframe.srcdoc = card.text;
  document.getElementById("cards").append(iframe);
  const bridge = new AppBridge(client, info, { serverTools: {}, logging: {} }, {
    hostContext: { theme: "light", displayMode: "inline", platform: "web", locale: "en-US",
      containerDimensions: { maxHeight: 6000 } },
  });
  bridge.onsizechange = ({ height }) => { if (height) iframe.style.height = `${Math.ceil(height) + 2}px`; };
  bridge.onloggingmessage = (m) => host.log.push(m);
  bridge.oninitialized = async () => {
    await bridge.sendToolInput({ arguments: args });
    await bridge.sendToolResult(result);
    host.state = "shown";
  };
  await bridge.connect(new PostMessageTransport(iframe.contentWindow, iframe.contentWindow));
}

main().catch((e) => {
  host.state = "failed";
  host.error = String(e && e.stack || e);
  document.getElementById("cards").textContent = `host failed: ${host.error}`;
});

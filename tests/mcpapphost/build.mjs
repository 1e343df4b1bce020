// Bundles host.js (the test host page's script) for the browser: node build.mjs <out.js>.
import { build } from "esbuild";

const out = process.argv[2];
if (!out) throw new Error("usage: node build.mjs <out.js>");
await build({
  entryPoints: [new URL("host.js", import.meta.url).pathname], outfile: out,
  bundle: true, format: "esm", platform: "browser", target: "es2022", logLevel: "warning",
});

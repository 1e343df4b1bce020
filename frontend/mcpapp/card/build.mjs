// Builds the approval card into one self-contained HTML file, ../card.html (run by
// `go generate ./frontend/mcpapp`; the output is committed and embedded with go:embed), or
// into the file named as the first argument (TestCardUpToDate compares the two).
// esbuild bundles src/card.js with ext-apps' App API into one script; the script and the
// stylesheet are inlined and allowed by their SHA-256 in the page's own CSP, which allows
// nothing else: no network (connect-src 'none'), no other script or style, no frames, no
// form posts. The build is deterministic: the same lockfile gives the same bytes.
import { build } from "esbuild";
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";

const here = new URL(".", import.meta.url);
const read = (p) => readFileSync(new URL(p, here), "utf8");

// zod (the App API validates messages with it) re-exports every message locale it has; the
// card speaks English, so zod's locale index is bundled as English only (about half the size).
const englishOnly = {
  name: "zod-locales-en",
  setup(b) {
    b.onResolve({ filter: /^\.\.\/locales\/index\.js$/ }, (a) =>
      a.importer.includes("/node_modules/zod/") ? { path: "zod-locales-en", namespace: "zod-locales" } : undefined);
    b.onLoad({ filter: /.*/, namespace: "zod-locales" }, () => ({
      contents: `export { default as en } from "./en.js";`, loader: "js",
      resolveDir: new URL("node_modules/zod/v4/locales/", here).pathname,
    }));
  },
};
const out = await build({
  entryPoints: [new URL("src/card.js", here).pathname],
  bundle: true, write: false, minify: true, format: "iife", platform: "browser", target: "es2022",
  legalComments: "none", charset: "utf8", logLevel: "warning", plugins: [englishOnly],
});
// A literal "</script" inside the bundle would end the inline script early.
const js = out.outputFiles[0].text.trim().replaceAll("</script", "<\\/script");
const css = read("src/card.css").trim();
const sha = (s) => `'sha256-${createHash("sha256").update(s, "utf8").digest("base64")}'`;
const csp = [
  "default-src 'none'", `script-src ${sha(js)}`, `style-src ${sha(css)}`, "img-src data:", "connect-src 'none'",
  "font-src 'none'", "media-src 'none'", "frame-src 'none'", "object-src 'none'", "base-uri 'none'", "form-action 'none'",
].join("; ");
const html = read("src/card.html").replace("{{CSP}}", () => csp).replace("{{CSS}}", () => css).replace("{{JS}}", () => js);
writeFileSync(process.argv[2] || new URL("../card.html", here), html);
console.log(`card.html: ${html.length} bytes (script ${js.length})`);

package mcpapp

// The card is built from card/ (src/card.js with @modelcontextprotocol/ext-apps' App API,
// bundled by esbuild into one self-contained HTML file, pinned by card/package-lock.json) and
// committed as card.html; CI runs `npm ci` there (.ci/run), and TestCardUpToDate rebuilds it.

//go:generate sh -c "cd card && npm ci --no-audit --no-fund --loglevel=error && node build.mjs"

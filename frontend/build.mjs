// Bundle the UI into the Python package's static folder (never committed, never a CDN).
import { build } from "esbuild";
import { copyFileSync, mkdirSync, readdirSync, rmSync, renameSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", "src", "stepscope", "web", "static");
// Build into a fresh folder and swap it in, so a failed build leaves nothing half-written.
const tmp = out + ".tmp";
rmSync(tmp, { recursive: true, force: true });
mkdirSync(tmp, { recursive: true });
await build({
  entryPoints: [join(here, "src", "main.ts")],
  bundle: true,
  minify: true,
  sourcemap: false,
  format: "iife",
  target: "es2020",
  outfile: join(tmp, "app.js"),
  legalComments: "linked",
  logLevel: "warning",
});
for (const name of readdirSync(join(here, "public"))) {
  copyFileSync(join(here, "public", name), join(tmp, name));
}
rmSync(out, { recursive: true, force: true });
renameSync(tmp, out);
console.log(`stepscope UI built into ${out}`);

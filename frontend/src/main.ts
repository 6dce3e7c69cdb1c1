// The app shell: run / host / tool navigation (kept in the URL's hash) and the page area.
import { ApiError, getJson, Progress, Run, ToolInfo } from "./api";
import { captureDialog } from "./capture";
import { disposeCharts } from "./charts";
import { bytes, h, int } from "./dom";
import { PageContext, PAGES } from "./pages/registry";

const RELOAD_MS = 20000;

const runSelect = document.getElementById("run") as HTMLSelectElement;
const hostSelect = document.getElementById("host") as HTMLSelectElement;
const toolSelect = document.getElementById("tool") as HTMLSelectElement;
const page = document.getElementById("page") as HTMLElement;

let runs: Run[] = [];
let tools: ToolInfo[] = [];
let generation = 0;

interface Place { run: string; host: string; tool: string; }

function readHash(): Place {
  const q = new URLSearchParams(location.hash.slice(1));
  return { run: q.get("run") ?? "", host: q.get("host") ?? "", tool: q.get("tool") ?? "" };
}

function writeHash(p: Place): void {
  const q = new URLSearchParams();
  q.set("run", p.run);
  if (p.host) q.set("host", p.host);
  q.set("tool", p.tool);
  const hash = "#" + q.toString();
  if (location.hash !== hash) history.replaceState(null, "", hash);
}

function fill(select: HTMLSelectElement, options: [string, string][], value: string): void {
  select.replaceChildren(...options.map(([v, label]) => h("option", { value: v }, label)));
  select.value = value;
}

function showError(err: unknown): void {
  const message = err instanceof Error ? err.message : String(err);
  page.replaceChildren(h("p", { className: "error", role: "alert" }, message));
}

async function loadRuns(): Promise<void> {
  const answer = await getJson<{ logdir: string; runs: Run[] }>("runs");
  runs = answer.runs;
  if (!runs.length) {
    fill(runSelect, [], "");
    page.replaceChildren(h("div", { className: "card" },
      h("h1", {}, "No profiles yet"),
      h("p", {}, `No runs were found in ${answer.logdir}. Profile a program with `,
        h("code", {}, "stepscope.start(logdir)"), " (or TensorFlow, JAX, PyTorch) and they will ",
        "appear here; this page looks again every 20 seconds.")));
  }
}

/** A run's name in the run list; a flight recorder's dump says what triggered it. */
function runLabel(run: Run): string {
  return run.trigger ? `${run.name} (flight recorder: ${run.trigger.replace(/_/g, " ")})` : run.name;
}

/** Fill the selectors for a place, fixing parts that do not exist; returns the fixed place. */
async function settle(want: Place): Promise<Place> {
  const run = runs.find((r) => r.name === want.run) ?? runs[0];
  fill(runSelect, runs.map((r) => [r.name, runLabel(r)]), run.name);
  const host = run.hosts.includes(want.host) ? want.host : "";
  fill(hostSelect, [["", run.hosts.length > 1 ? `All hosts (${run.hosts.length})` : "All hosts"],
                    ...run.hosts.map((n): [string, string] => [n, n])], host);
  tools = (await getJson<{ tools: ToolInfo[] }>("tools", { run: run.name, host })).tools;
  const tool = tools.find((t) => t.name === want.tool) ?? tools[0];
  fill(toolSelect, tools.map((t) => [t.name, t.title]), tool.name);
  return { run: run.name, host, tool: tool.name };
}

async function show(want: Place): Promise<void> {
  const mine = ++generation;
  if (!runs.length) return;
  disposeCharts();
  try {
    const place = await settle(want);
    if (mine !== generation) return;
    writeHash(place);
    const render = PAGES[place.tool];
    if (!render) {
      page.replaceChildren(h("p", {}, `The ${place.tool} page is not in this build.`));
      return;
    }
    page.replaceChildren(h("p", { className: "muted" }, "Loading…"));
    const ctx: PageContext = {
      ...place, tools,
      stale: () => mine !== generation,
      progress: (p: Progress) => { if (mine === generation) showProgress(place.run, p); },
      go: (tool: string) => void show({ ...place, tool }),
    };
    const content = await render(ctx);
    if (mine !== generation) return;
    page.replaceChildren(content);
    await refreshTools(place, mine);
  } catch (err) {
    if (mine === generation) showError(err instanceof ApiError ? err : err);
  }
}

/** Tools that show only some runs' data (the memory profile) are listed once the run has
 * loaded: ask again after a page has rendered. */
async function refreshTools(place: Place, mine: number): Promise<void> {
  const fresh = (await getJson<{ tools: ToolInfo[] }>("tools", { run: place.run,
                                                               host: place.host })).tools;
  if (mine !== generation || fresh.map((t) => t.name).join() === tools.map((t) => t.name).join())
    return;
  tools = fresh;
  fill(toolSelect, tools.map((t) => [t.name, t.title]), place.tool);
}

function showProgress(run: string, p: Progress): void {
  const indexing = p.status === "indexing";
  const share = indexing ? p.share ?? 0 : p.total_bytes ? p.done_bytes / p.total_bytes : 0;
  const bar = h("div");
  bar.style.width = `${(100 * share).toFixed(1)}%`;
  if (indexing) {
    page.replaceChildren(h("div", { className: "card", id: "loading" },
      h("h2", {}, `Indexing run ${run} for the trace viewer`),
      h("div", { className: "progress", role: "progressbar",
                 "aria-valuenow": Math.round(100 * share), "aria-valuemin": 0,
                 "aria-valuemax": 100 }, bar),
      h("p", { className: "muted" }, `${int(p.events ?? 0)} events; built once, then read `
        + "from the cache.")));
    return;
  }
  page.replaceChildren(h("div", { className: "card", id: "loading" },
    h("h2", {}, `Loading run ${run}`),
    h("div", { className: "progress", role: "progressbar",
               "aria-valuenow": Math.round(100 * share), "aria-valuemin": 0,
               "aria-valuemax": 100 }, bar),
    h("p", { className: "muted" },
      p.total_bytes ? `${bytes(p.done_bytes)} of ${bytes(p.total_bytes)}` : "reading…",
      p.file ? ` — ${p.file}` : "", p.done_bytes >= p.total_bytes && p.total_bytes
        ? " (analysing)" : "")));
}

async function reloadRuns(): Promise<void> {
  const before = runs.map((r) => r.name).join("\n");
  await loadRuns();
  if (runs.map((r) => r.name).join("\n") !== before) {
    await show({ run: runSelect.value || readHash().run, host: hostSelect.value,
                 tool: toolSelect.value });
  }
}

runSelect.addEventListener("change", () =>
  void show({ run: runSelect.value, host: "", tool: toolSelect.value }));
hostSelect.addEventListener("change", () =>
  void show({ run: runSelect.value, host: hostSelect.value, tool: toolSelect.value }));
toolSelect.addEventListener("change", () =>
  void show({ run: runSelect.value, host: hostSelect.value, tool: toolSelect.value }));
document.getElementById("reload")!.addEventListener("click", () => void reloadRuns().catch(showError));
window.addEventListener("hashchange", () => {
  const p = readHash();
  if (p.run !== runSelect.value || p.host !== hostSelect.value || p.tool !== toolSelect.value) {
    void show(p);
  }
});
const dialog = captureDialog(async (run: string) => {
  await loadRuns();
  await show({ run, host: "", tool: "overview_page" });
});
document.body.append(dialog);
document.getElementById("capture")!.addEventListener("click", () => dialog.showModal());
setInterval(() => {
  if (document.visibilityState === "visible") void reloadRuns().catch(() => undefined);
}, RELOAD_MS);

loadRuns().then(() => show(readHash())).catch(showError);

// Trace viewer: a canvas timeline fed by the server's level-of-detail window queries. The
// parts: state.ts (what is shown), data.ts (the /api/trace routes), draw.ts (gutter, axis,
// canvas), tools.ts (tool bar, details, search) and input.ts (mouse and keyboard).
import { toolData } from "../../api";
import { duration, h } from "../../dom";
import type { PageContext } from "../registry";
import { TraceData } from "./data";
import { createSurface, Painter } from "./draw";
import { criticalPathSwitch } from "./critical_path";
import { bindInput } from "./input";
import { alignedOf, createState, Meta, View, viewOfAligned } from "./state";
import { TraceTools } from "./tools";
import { requestPythonRange, takeTraceSearch } from "../python/link";

// The moment last shown, on the run's lined-up clock: switching to another host of the same
// run shows the same moment there (hosts' clocks differ; the pod viewer's alignment says how).
let lastShown: { run: string; host: string; aligned: View } | null = null;
const DETAILS_PEEK_PX = 72;
const MIN_TRACKS_PX = 320;

export async function renderTrace(ctx: PageContext): Promise<HTMLElement> {
  const meta = await toolData<Meta>({ run: ctx.run, host: ctx.host, tool: "trace_viewer" },
                                    ctx.progress);
  const s = createState(meta);
  if (lastShown && lastShown.run === meta.run && lastShown.host !== meta.host) {
    s.view = viewOfAligned(meta, lastShown.aligned);
  }
  const remember = (): void => {
    lastShown = { run: meta.run, host: meta.host, aligned: alignedOf(meta, s.view) };
  };
  const surface = createSurface();
  const painter = new Painter(s, surface);
  const data = new TraceData(ctx, meta.host, () => s.view, () => painter.width(), (w) => {
    s.data = w;
    surface.canvas.dataset.window = `${w.start_ns},${w.end_ns}`;
    remember();
    painter.draw();
  }, async () => {
    // The index is built: its tracks have their rows, the overview's had one each.
    const full = await toolData<Meta>({ run: ctx.run, host: ctx.host, tool: "trace_viewer" },
                                      ctx.progress);
    s.meta = full;
    s.tracks = full.tracks;
    painter.buildGutter();
  });
  const tools = new TraceTools(s, painter, data);
  data.onError = tools.showError;
  if (ctx.tools.some((t) => t.name === "python_profile")) {
    tools.onRange = { label: "Python profile of this range →", open: (a, b) => {
      requestPythonRange(meta.origin_ns + a, meta.origin_ns + b);
      ctx.go("python_profile");
    } };
  }
  const search = takeTraceSearch(); // another page asked for a function's rows
  bindInput(s, painter, tools);

  // Hooks for tests and scripting: where an event is drawn, what the view is.
  (window as unknown as Record<string, unknown>).stepscopeTrace = {
    view: () => ({ ...s.view }),
    locate: (id: number) => painter.locate(id),
    box: (id: number) => painter.box(id),
    flows: () => painter.drawnFlows.map((f) => ({ kind: f.kind, from: f.from.id, to: f.to.id })),
    rects: () => painter.drawnRects,
    blocks: () => painter.drawnBlocks,
    labels: () => painter.drawnLabels,
    counters: () => painter.drawnCounters,
    flowsInWindow: () => s.data?.flows_in_window ?? 0,
    timing: () => s.timing,
    drawMs: () => painter.drawMs,
    pan: (share: number) => tools.pan(share),
    setView: (t0: number, t1: number) => tools.setView({ t0, t1 }),
    names: () => (s.data ? s.data.events.id.map((_, i) => s.data!.names[s.data!.events.name[i]])
                  : []),
    ready: () => !data.fetching && s.data !== null && !data.coarse && !data.flowsPending,
    overlay: () => s.overlay.length,
  };

  painter.buildGutter();
  const clock = meta.clock && meta.hosts.length > 1
    ? h("span", { id: "trace-clock", className: "muted", title: meta.clock.reason },
        `clock ${meta.clock.shift_ns >= 0 ? "+" : "−"}${duration(Math.abs(meta.clock.shift_ns))}` +
        ` (${meta.clock.method})`)
    : "";
  // The track area takes the window's height below its top, less a strip where the details
  // panel's first lines show; at least MIN_TRACKS_PX. Refitted when the window or what is
  // above the area (the tool bar, the axis row's labels) changes size.
  const controls = h("div", { className: "controls" }, tools.toolBar, tools.search, tools.prev,
    tools.next, tools.matchLabel, tools.reset, tools.timingLabel, clock,
    h("label", { id: "trace-flow-label" }, surface.flowToggle, " Flow arrows "),
    surface.flowLabel, criticalPathSwitch(ctx, s, painter));
  const axisRow = h("div", { className: "trace-axis-row" }, h("div", {
    className: "trace-axis-gutter" }, surface.range, " ", surface.drawnLabel), surface.axis);
  const above = new ResizeObserver(() => fit());
  const fit = (): void => {
    if (!surface.scroller.isConnected) {
      window.removeEventListener("resize", fit);
      above.disconnect();
      return;
    }
    const top = surface.scroller.getBoundingClientRect().top + window.scrollY;
    const height = `${Math.round(Math.max(window.innerHeight - top - DETAILS_PEEK_PX,
                                          MIN_TRACKS_PX))}px`;
    if (surface.scroller.style.height !== height) surface.scroller.style.height = height;
  };
  window.addEventListener("resize", fit);
  const page = h("div", { id: "trace-page" }, controls, axisRow, surface.scroller, tools.details);
  setTimeout(() => {
    fit();
    above.observe(controls);
    above.observe(axisRow);
    painter.draw();
    void data.refresh().then(async () => {
      if (search === null) return;
      tools.search.value = search;
      await tools.runSearch(1);
    }).catch(tools.showError);
  }, 0);
  return page;
}

// Memory viewer: one XLA program's memory at its peak. The sizes, the heap (and its unpadded
// size) over program order with the peak marked, and the buffers live at the peak as bars by
// size; hovering (or focusing) a bar shows the buffer's details.
import { toolData } from "../../api";
import { bytes, h, svg } from "../../dom";
import type { PageContext } from "../registry";
import { MemoryViewerData, PeakBuffer } from "./data";
import { hloStyle } from "./style";

const W = 760, H = 260, LEFT = 80, RIGHT = 20, TOP = 16, BOTTOM = 40;
const TYPE_COLORS: Record<string, string> = { parameter: "#1a73e8", output: "#188038",
  temporary: "#e37400", constant: "#9334e6", "thread-local": "#80868b" };
// Bars drawn at most; the rest are counted below the chart.
const MAX_BARS = 100;

function heapChart(d: MemoryViewerData): SVGElement {
  const n = d.heap_bytes.length;
  const top = Math.max(...d.heap_bytes, 1);
  const px = (i: number) => LEFT + (n > 1 ? i / (n - 1) : 0) * (W - LEFT - RIGHT);
  const py = (v: number) => TOP + (1 - v / top) * (H - TOP - BOTTOM);
  const line = (values: number[], color: string, id: string) => svg("polyline", {
    id, fill: "none", stroke: color, "stroke-width": 1.5,
    points: values.map((v, i) => `${px(i).toFixed(1)},${py(v).toFixed(1)}`).join(" ") });
  const root = svg("svg", { id: "mv-heap-svg", width: W, height: H, viewBox: `0 0 ${W} ${H}`,
                            role: "img", "aria-label": "Heap size over program order",
                            "data-points": n });
  for (let k = 0; k <= 4; k++) {
    const v = (top * k) / 4;
    root.append(svg("line", { x1: LEFT, x2: W - RIGHT, y1: py(v), y2: py(v), stroke: "#eceff1" }),
                svg("text", { x: LEFT - 6, y: py(v) + 4, "text-anchor": "end", "font-size": 11,
                              fill: "#5f6368" }, bytes(v)));
  }
  root.append(line(d.unpadded_heap_bytes, "#8ab4f8", "mv-unpadded-line"),
              line(d.heap_bytes, "#1a73e8", "mv-heap-line"));
  const at = d.peak_index;
  root.append(
    svg("line", { id: "mv-peak-line", x1: px(at), x2: px(at), y1: TOP, y2: H - BOTTOM,
                  stroke: "#d93025", "stroke-dasharray": "4 3" }),
    svg("circle", { id: "mv-peak-dot", cx: px(at), cy: py(d.heap_bytes[at] ?? 0), r: 4,
                    fill: "#d93025", "data-index": at }),
    svg("text", { x: Math.min(px(at) + 6, W - RIGHT - 120), y: TOP + 12, "font-size": 11,
                  fill: "#d93025" }, `peak ${bytes(d.heap_bytes[at] ?? 0)}`),
    svg("text", { x: (LEFT + W - RIGHT) / 2, y: H - 10, "text-anchor": "middle", "font-size": 12 },
        "Program order (heap simulator events)"));
  return root;
}

function details(b: PeakBuffer): HTMLElement[] {
  const row = (k: string, v: string, key?: string) =>
    [h("dt", {}, k), h("dd", key ? { "data-key": key } : {}, v)];
  return [h("h3", {}, b.name), h("dl", { className: "kv" },
    ...row("Op", b.op, "op"), ...row("Shape", b.shape, "shape"), ...row("Size", bytes(b.size_bytes), "size"),
    ...row("Unpadded size", bytes(b.unpadded_bytes), "unpadded"),
    ...row("Padding overhead", bytes(b.padding_bytes), "padding"),
    ...row("Allocation type", b.allocation_type, "type"),
    ...row("Source op", b.source_op || "–", "source-op"),
    ...(b.source ? row("Source", b.source, "source") : []))];
}

function bars(d: MemoryViewerData): HTMLElement {
  const shown = d.peak_buffers.slice(0, MAX_BARS);
  const rowH = 18, labelW = 260, barW = W - labelW - 100;
  const height = (shown.length + (d.small_buffers_count ? 1 : 0)) * rowH + 8;
  const largest = Math.max(shown[0]?.size_bytes ?? 1, d.small_buffers_bytes, 1);
  const root = svg("svg", { id: "mv-bars", width: W, height, viewBox: `0 0 ${W} ${height}`,
                            role: "group", "aria-label": "Buffers live at the peak",
                            "data-bars": shown.length });
  const wrap = h("div", { className: "chart-wrap bars-wrap" });
  const card = h("div", { className: "hover-card", id: "mv-card", role: "tooltip", hidden: true });
  const label = (text: string) => (text.length > 38 ? text.slice(0, 37) + "…" : text);
  shown.forEach((b, i) => {
    const y = i * rowH + 4;
    const width = Math.max(1, (b.size_bytes / largest) * barW);
    const g = svg("g", { class: "mv-bar", tabindex: 0, "data-name": b.name,
                         "data-size": b.size_bytes, "aria-label": `${b.name}: ${bytes(b.size_bytes)}` },
      svg("text", { x: labelW - 6, y: y + 12, "text-anchor": "end", "font-size": 11 }, label(b.name)),
      svg("rect", { x: labelW, y, width, height: rowH - 4,
                    fill: TYPE_COLORS[b.allocation_type] ?? "#80868b" }),
      svg("text", { x: labelW + width + 4, y: y + 12, "font-size": 11, fill: "#5f6368" }, bytes(b.size_bytes)));
    const show = () => {
      card.replaceChildren(...details(b));
      card.dataset.name = b.name;
      card.hidden = false;
      card.style.left = `${W + 8}px`;
      card.style.top = `${Math.max(0, y - 20)}px`;
    };
    const hide = () => { card.hidden = true; };
    g.addEventListener("mouseenter", show);
    g.addEventListener("focus", show);
    g.addEventListener("mouseleave", hide);
    g.addEventListener("blur", hide);
    root.append(g);
  });
  if (d.small_buffers_count) {
    const y = shown.length * rowH + 4;
    const width = Math.max(1, (d.small_buffers_bytes / largest) * barW);
    root.append(svg("g", { id: "mv-small" },
      svg("text", { x: labelW - 6, y: y + 12, "text-anchor": "end", "font-size": 11 },
          `${d.small_buffers_count} small (< ${d.small_buffer_limit.toLocaleString("en-US")} B)`),
      svg("rect", { x: labelW, y, width, height: rowH - 4, fill: "#bdc1c6" }),
      svg("text", { x: labelW + width + 4, y: y + 12, "font-size": 11, fill: "#5f6368" },
          bytes(d.small_buffers_bytes))));
  }
  wrap.append(root, card);
  return wrap;
}

async function load(ctx: PageContext, module: string, space: string): Promise<MemoryViewerData> {
  return toolData<MemoryViewerData>({ run: ctx.run, host: ctx.host, tool: "memory_viewer",
                                      module, memory_space: space }, ctx.progress);
}

export async function renderMemoryViewer(ctx: PageContext): Promise<HTMLElement> {
  const page = h("div", { id: "memory-viewer-page", className: "hlo-page" }, hloStyle());
  const body = h("div", {});
  const draw = (d: MemoryViewerData) => {
    const program = h("select", { id: "mv-module", "aria-label": "Program" },
      ...d.programs.map((p) => h("option", { value: p.label, selected: p.label === d.module_label }, p.label)));
    const space = h("select", { id: "mv-space", "aria-label": "Memory space" },
      ...d.memory_spaces.map((s) => h("option", { value: String(s), selected: s === d.memory_space },
                                      `memory space ${s}`)));
    const reload = async () => {
      const next = await load(ctx, program.value, space.value);
      if (!ctx.stale()) draw(next);
    };
    program.addEventListener("change", () => { void reload(); });
    space.addEventListener("change", () => { void reload(); });
    const kv = (k: string, v: number, id: string) =>
      [h("dt", {}, k), h("dd", { id, "data-bytes": v }, bytes(v))];
    const summary = h("dl", { className: "kv", id: "mv-summary" },
      ...kv("Peak heap", d.peak_heap_bytes, "mv-peak"),
      ...kv("Peak heap, unpadded", d.peak_unpadded_heap_bytes, "mv-peak-unpadded"),
      ...kv("Padding overhead", d.padding_overhead_bytes, "mv-padding"),
      ...kv("Arguments", d.argument_bytes, "mv-arguments"),
      ...kv("Temporaries", d.temporary_bytes, "mv-temporary"),
      ...kv("Outputs", d.output_bytes, "mv-outputs"),
      ...kv("Memory reserved", d.reserved_bytes, "mv-reserved"));
    const peakAt = d.instructions[d.peak_index - 1];
    body.replaceChildren(
      h("h1", {}, `Memory viewer — ${d.run}${ctx.host ? " — " + ctx.host : ""}`),
      h("div", { className: "controls" }, program, space),
      ...d.notes.map((n) => h("p", { className: "note" }, n)),
      h("section", { className: "card wide" }, h("h2", {}, d.module_label), summary),
      h("section", { className: "card wide" }, h("h2", {}, "Heap over program order"),
        d.heap_bytes.length
          ? h("div", {}, heapChart(d), h("p", { className: "muted", id: "mv-peak-at" },
              `Peak at point ${d.peak_index} of ${d.heap_bytes.length}` +
              (peakAt ? `, after ${peakAt}` : "") + "; dark: heap, light: unpadded."))
          : h("p", { id: "mv-no-heap", className: "muted" },
              "No heap simulation for this program: only buffers live throughout are shown.")),
      h("section", { className: "card wide" },
        h("h2", {}, "Buffers live at the peak, largest first"),
        h("p", { className: "muted" }, "Colour: " + Object.keys(TYPE_COLORS).join(", ") +
          " (blue, green, orange, purple, grey)."),
        bars(d),
        d.peak_buffers.length > MAX_BARS
          ? h("p", { className: "muted" }, `${d.peak_buffers.length - MAX_BARS} smaller buffers not drawn.`)
          : null));
  };
  draw(await load(ctx, "", ""));
  page.append(body);
  return page;
}

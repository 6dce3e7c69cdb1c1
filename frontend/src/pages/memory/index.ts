// Memory profile: per allocator, the summary, the timeline (hover, drag to zoom) and the
// allocations live at the peak. The parts: data.ts (the tool's JSON), chart.ts (the timeline);
// this module lays the page out and keeps the chosen allocator and window.
import { apiUrl } from "../../api";
import { bytes, h, int, ms } from "../../dom";
import { Column, numberColumn, SortableTable } from "../../table";
import type { PageContext } from "../registry";
import { timelineChart } from "./chart";
import { Allocator, BreakdownRow, fetchMemory, MemoryProfile, OpMemory } from "./data";

const WIDTH = 900;
const SIZE_UNITS: [string, number][] = [["B", 1], ["KiB", 1024], ["MiB", 1024 ** 2],
                                        ["GiB", 1024 ** 3]];

const BREAKDOWN: Column<BreakdownRow>[] = [
  { key: "op", title: "Op", value: (r) => r.op || "(unknown)", className: "name", clip: true },
  numberColumn<BreakdownRow>("size_bytes", "Allocation size", bytes),
  numberColumn<BreakdownRow>("requested_bytes", "Requested size", bytes),
  numberColumn<BreakdownRow>("occurrences", "Occurrences", int),
  { key: "region_type", title: "Region type", value: (r) => r.region_type },
  { key: "data_type", title: "Data type", value: (r) => r.data_type },
  { key: "shape", title: "Shape", value: (r) => r.shape },
];
const OPS: Column<OpMemory>[] = [
  { key: "name", title: "Op", value: (r) => r.name, className: "name", clip: true },
  { key: "allocator", title: "Allocator", value: (r) => r.allocator },
  numberColumn<OpMemory>("allocated_bytes", "Allocated (with children)", bytes),
  numberColumn<OpMemory>("self_allocated_bytes", "Self allocated", bytes),
];

function label(a: Allocator, many: boolean): string {
  return many ? `${a.name} (${a.host})` : a.name;
}

function summary(a: Allocator): HTMLElement {
  const rows: [string, string][] = [
    ["Allocations", int(a.num_allocations)],
    ["Deallocations", int(a.num_deallocations)],
    ["Memory capacity", a.capacity_bytes === null ? "unknown" : bytes(a.capacity_bytes)],
    ["Peak heap + stack in use", bytes(a.peak_bytes_in_use)],
    ["Peak at", `${ms(a.peak_time_ms)} ms from the profile start` +
                (a.peak_step === null ? "" : `, step ${a.peak_step}`)],
    ["Peak memory reserved", a.peak_reserved_bytes === null ? "not reported"
      : bytes(a.peak_reserved_bytes)],
    ["Stack at the peak", a.stack_bytes_at_peak === null ? "not reported"
      : bytes(a.stack_bytes_at_peak)],
    ["Fragmentation at the peak", a.fragmentation_at_peak === null ? "not reported"
      : `${(100 * a.fragmentation_at_peak).toFixed(1)}%`],
  ];
  if (a.allocator_peak_bytes !== null)
    rows.push(["Allocator's own lifetime peak", bytes(a.allocator_peak_bytes)]);
  return h("section", { className: "card", id: "memory-summary", "data-allocator": a.name,
                        "data-host": a.host },
    h("h2", {}, "Summary"),
    h("table", { className: "facts" }, ...rows.map(([k, v]) =>
      h("tr", {}, h("td", { className: "label" }, k), h("td", { "data-key": k }, v)))));
}

function breakdown(a: Allocator, ctx: PageContext): HTMLElement {
  const table = new SortableTable<BreakdownRow>(BREAKDOWN, a.breakdown_at_peak, 2000,
                                                "memory-breakdown");
  const filter = h("input", { type: "search", id: "memory-filter", placeholder: "Filter by op",
                              "aria-label": "Filter by op" });
  // The smallest size in the unit the rows are written in (bytes() names KiB, MiB, GiB).
  const smallest = h("input", { type: "number", id: "memory-min-size", min: 0, step: "any",
                                value: 0, "aria-label": "Smallest size shown" });
  const unit = h("select", { id: "memory-min-unit", "aria-label": "Unit of the smallest size" },
    ...SIZE_UNITS.map(([name]) => h("option", { value: name, selected: name === "MiB" }, name)));
  const apply = () => {
    const text = filter.value.toLowerCase();
    const factor = SIZE_UNITS.find(([name]) => name === unit.value)?.[1] ?? 1;
    const min = Math.max(0, Number(smallest.value) || 0) * factor;
    table.setFilter((r) => r.size_bytes >= min && (!text || r.op.toLowerCase().includes(text)));
  };
  filter.addEventListener("input", apply);
  smallest.addEventListener("input", apply);
  unit.addEventListener("change", apply);
  return h("section", { className: "card wide", id: "memory-breakdown-card" },
    h("h2", {}, "Memory breakdown at the peak"),
    h("p", { className: "muted" }, "Allocations live at the peak, identical ones grouped",
      a.breakdown_rows_total > a.breakdown_at_peak.length
        ? ` (the ${int(a.breakdown_at_peak.length)} heaviest of ${int(a.breakdown_rows_total)})`
        : "", "."),
    h("p", { className: "controls" }, filter, " ",
      h("label", {}, "Smallest size shown ", smallest), " ", unit, " ",
      h("a", { id: "export-csv", download: "",
               href: apiUrl("csv", { run: ctx.run, host: ctx.host, tool: ctx.tool }) },
        "Export as CSV")),
    table.element);
}

function problems(data: MemoryProfile): HTMLElement | null {
  const entries = Object.entries(data.problems);
  if (!entries.length) return null;
  return h("p", { className: "note", id: "memory-problems" }, "Data problems, counted and ",
    "left out: ", entries.map(([host, p]) => `${host}: ` + Object.entries(p)
      .map(([k, v]) => `${k.replace(/_/g, " ")} ${v}`).join(", ")).join("; "), ".");
}

export async function renderMemory(ctx: PageContext): Promise<HTMLElement> {
  let index = 0;
  let window: [number, number] | null = null;
  let data = await fetchMemory(ctx.run, ctx.host, index, WIDTH, window, ctx.progress);
  const many = new Set(data.allocators.map((a) => a.host)).size > 1;
  const page = h("div", { id: "memory-page" });
  const select = h("select", { id: "memory-allocator", "aria-label": "Memory allocator" },
    ...data.allocators.map((a, i) => h("option", { value: i }, label(a, many))));
  const body = h("div");
  const draw = () => {
    const a = data.allocators[index];
    const t = data.timeline;
    const reset = h("button", { type: "button", id: "memory-reset", disabled: !window,
                                onclick: () => { window = null; void reload(); } },
                    "Reset zoom");
    body.replaceChildren(...[
      summary(a),
      h("section", { className: "card wide", id: "memory-timeline-card" },
        h("h2", {}, "Memory timeline"),
        h("p", { className: "muted", id: "memory-points" },
          `${int(t.points)} points of ${int(t.events)} allocations and frees`,
          window ? ` between ${ms(window[0])} and ${ms(window[1])} ms` : "",
          "; drag across the chart to zoom. ", reset),
        timelineChart(t, (from, to) => { window = [from, to]; void reload(); })),
      breakdown(a, ctx),
      data.ops.length ? h("section", { className: "card wide", id: "memory-ops-card" },
        h("h2", {}, "Memory by op"),
        h("p", { className: "muted" }, "Bytes allocated while each op ran, frees counted ",
          "negative, summed over its calls."),
        new SortableTable<OpMemory>(OPS, data.ops.filter((o) => !many || o.host === a.host),
                                    2000, "memory-ops").element) : null,
    ].filter((e): e is HTMLElement => e !== null));
  };
  const reload = async () => {
    data = await fetchMemory(ctx.run, ctx.host, index, WIDTH, window, ctx.progress);
    if (!ctx.stale()) draw();
  };
  select.addEventListener("change", () => { index = Number(select.value); window = null;
                                            void reload(); });
  page.append(h("h1", {}, `Memory profile — ${data.run}${data.host ? " — " + data.host : ""}`),
    h("p", { className: "controls" }, h("label", {}, "Allocator ", select)));
  const note = problems(data);
  if (note) page.append(note);
  page.append(body);
  draw();
  return page;
}

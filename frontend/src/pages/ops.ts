// Framework op stats: pies of self time (per op and per type, host and device), the op
// table (sortable, filterable, with an idle-time toggle) and its CSV export.
import { apiUrl, toolData } from "../api";
import { pie } from "../charts";
import { h, int, ms, pct } from "../dom";
import { shortName } from "../names";
import { Column, numberColumn, SortableTable } from "../table";
import { baselineBar, baselineRuns, opChanges } from "./diff/baseline";
import type { Change, Diff } from "./diff/data";
import type { PageContext } from "./registry";

interface OpRow {
  host_or_device: string; type: string; name: string; occurrences: number; total_ms: number;
  avg_ms: number; self_ms: number; avg_self_ms: number; self_percent: number;
  cumulative_percent: number;
}
interface KernelRow {
  name: string; type: string; op: string; occurrences: number; total_ms: number; avg_ms: number;
  min_ms: number; max_ms: number;
}
interface OpStats { run: string; host: string | null; include_idle: boolean; ops: OpRow[];
                    kernels: KernelRow[]; }

const num = (key: keyof OpRow, title: string, f: (v: number) => string = ms) =>
  numberColumn<OpRow>(key, title, f);

export const OP_COLUMNS: Column<OpRow>[] = [
  { key: "host_or_device", title: "Host/device", value: (r) => r.host_or_device },
  { key: "type", title: "Type", value: (r) => r.type, className: "type" },
  { key: "name", title: "Operation", value: (r) => r.name, className: "name" },
  num("occurrences", "#Occurrences", int),
  num("total_ms", "Total time (ms)"),
  num("avg_ms", "Avg. time (ms)"),
  num("self_ms", "Total self-time (ms)"),
  num("avg_self_ms", "Avg. self-time (ms)"),
  num("self_percent", "Self-time %", pct),
  num("cumulative_percent", "Cumulative self-time %", pct),
];

const knum = (key: keyof KernelRow, title: string, f: (v: number) => string = ms) =>
  numberColumn<KernelRow>(key, title, f);

const KERNEL_COLUMNS: Column<KernelRow>[] = [
  { key: "name", title: "Kernel", value: (r) => r.name, format: (r) => shortName(r.name),
    className: "name", clip: true },
  { key: "type", title: "Type", value: (r) => r.type },
  { key: "op", title: "Launched by op", value: (r) => r.op, className: "name" },
  knum("occurrences", "#Occurrences", int),
  knum("total_ms", "Total time (ms)"),
  knum("avg_ms", "Avg. time (ms)"),
  knum("min_ms", "Min (ms)"),
  knum("max_ms", "Max (ms)"),
];

function sumBy(rows: OpRow[], key: (r: OpRow) => string): { name: string; value: number }[] {
  const sums = new Map<string, number>();
  for (const r of rows) sums.set(key(r), (sums.get(key(r)) ?? 0) + r.self_ms);
  return [...sums].map(([name, value]) => ({ name, value }));
}

// With "include idle time" on, the idle rows are slices of the pies too, as in XProf.
function pies(rows: OpRow[], includeIdle = false): HTMLElement {
  const charts: HTMLElement[] = [];
  for (const side of ["Host", "Device"]) {
    const mine = rows.filter((r) => r.host_or_device === side && (includeIdle || r.type !== "IDLE"));
    if (!mine.length) continue;
    const slug = side.toLowerCase();
    charts.push(pie(`pie-${slug}-op`, `${side}: self time per op`, sumBy(mine, (r) => r.name)));
    charts.push(pie(`pie-${slug}-type`, `${side}: self time per op type`, sumBy(mine, (r) => r.type)));
  }
  return h("div", { className: "pies card wide" }, ...charts);
}

export async function renderOps(ctx: PageContext): Promise<HTMLElement> {
  const params = (idle: boolean) => ({ run: ctx.run, host: ctx.host, tool: "framework_op_stats",
                                       include_idle: idle ? "true" : undefined });
  const load = (idle: boolean) => toolData<OpStats>(params(idle), ctx.progress);
  const data = await load(false);
  const others = await baselineRuns(ctx);

  let rows = data.ops;
  let table = new SortableTable<OpRow>(OP_COLUMNS, rows, 2000, "ops-table");
  const tableBox = h("div", {}, table.element);
  let filterFn: (r: OpRow) => boolean = () => true;
  // With a baseline chosen: a column of each op's change of self time per step against it.
  let changes = new Map<string, Change>();
  const rebuild = (d: Diff | null) => {
    changes = d ? opChanges(d) : new Map();
    const delta = (r: OpRow) => changes.get(`${r.host_or_device}:${r.name}`)?.delta ?? null;
    // Beside the op's name, where it is seen without scrolling.
    const columns: Column<OpRow>[] = d ? [...OP_COLUMNS.slice(0, 3), {
      key: "delta_vs_base", title: `Δ self ms/step vs ${d.base}`, numeric: true,
      value: (r) => delta(r) ?? 0,
      format: (r) => { const v = delta(r); return v === null ? "–" : (v > 0 ? "+" : "") + v.toFixed(3); },
    }, ...OP_COLUMNS.slice(3)] : OP_COLUMNS;
    table = new SortableTable<OpRow>(columns, rows, 2000, "ops-table");
    table.setFilter(filterFn);
    tableBox.replaceChildren(table.element);
  };
  const filter = h("input", { type: "search", id: "op-filter", placeholder: "Filter by op name",
                              "aria-label": "Filter by op name" });
  filter.addEventListener("input", () => {
    const needle = filter.value.toLowerCase();
    filterFn = (r) => r.name.toLowerCase().includes(needle);
    table.setFilter(filterFn);
  });
  const csv = h("a", { id: "export-csv", href: apiUrl("csv", params(false)), download: "" },
                "Export as CSV");
  const idle = h("input", { type: "checkbox", id: "include-idle" });
  const pieBox = h("div", {}, pies(data.ops));
  idle.addEventListener("change", async () => {
    idle.disabled = true;
    try {
      const fresh = await load(idle.checked);
      if (ctx.stale()) return;
      rows = fresh.ops;
      table.setRows(rows);
      pieBox.replaceChildren(pies(fresh.ops, idle.checked));
      csv.setAttribute("href", apiUrl("csv", params(idle.checked)));
    } finally {
      idle.disabled = false;
    }
  });

  const kernels = data.kernels.length
    ? h("section", { className: "card wide", id: "kernels" }, h("h2", {}, "Device kernels"),
        new SortableTable<KernelRow>(KERNEL_COLUMNS, data.kernels, 500, "kernels-table").element)
    : null;
  const bar = baselineBar(ctx, others, "ops-baseline", rebuild);
  return h("div", { id: "ops-page" },
    h("h1", {}, `Framework op stats — ${data.run}${data.host ? " — " + data.host : ""}`),
    pieBox,
    h("section", { className: "card wide" },
      h("div", { className: "controls" }, filter,
        h("label", {}, idle, " Include idle time"), csv),
      bar, tableBox),
    kernels);
}

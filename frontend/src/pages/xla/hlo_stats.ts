// HLO op stats: one row per HLO op (sortable, filterable, exportable as CSV).
import { apiUrl, toolData } from "../../api";
import { h, int, ms, pct } from "../../dom";
import { Column, SortableTable } from "../../table";
import type { PageContext } from "../registry";
import { fig, HloStatsData, OpRow, util } from "./data";
import { xlaStyle } from "./style";

const opt = (key: keyof OpRow, title: string, f: (v: number) => string = (v) => fig(v))
  : Column<OpRow> => ({ key, title, numeric: true, value: (r) => (r[key] as number | null) ?? -1,
                        format: (r) => (r[key] === null ? "–" : f(r[key] as number)) });

const COLUMNS: Column<OpRow>[] = [
  { key: "name", title: "HLO op", value: (r) => r.name, className: "name" },
  { key: "module", title: "Program", value: (r) => r.module },
  { key: "category", title: "Category", value: (r) => r.category },
  { key: "occurrences", title: "#Occurrences", numeric: true, value: (r) => r.occurrences,
    format: (r) => int(r.occurrences) },
  { key: "total_ms", title: "Total (ms)", numeric: true, value: (r) => r.total_ms, format: (r) => ms(r.total_ms) },
  { key: "avg_ms", title: "Avg (ms)", numeric: true, value: (r) => r.avg_ms, format: (r) => ms(r.avg_ms) },
  { key: "self_ms", title: "Self (ms)", numeric: true, value: (r) => r.self_ms, format: (r) => ms(r.self_ms) },
  { key: "time_percent", title: "Time %", numeric: true, value: (r) => r.time_percent,
    format: (r) => pct(r.time_percent) },
  opt("gflops_per_s", "GFLOP/s", (v) => fig(v)),
  opt("gbytes_per_s", "GiB/s"),
  opt("operational_intensity", "FLOP/byte"),
  opt("flops_utilization", "FLOPS util.", (v) => util(v)),
  { key: "bound_by", title: "Bound by", value: (r) => r.bound_by },
  { key: "flops_estimated", title: "FLOPs", value: (r) => (r.flops === null ? "unknown"
    : r.flops_estimated ? "estimated" : "recorded") },
  { key: "tf_op", title: "Framework op", value: (r) => r.tf_op, clip: true },
  { key: "expression", title: "HLO expression", value: (r) => r.expression, clip: true },
];

export async function renderHloStats(ctx: PageContext): Promise<HTMLElement> {
  const params = { run: ctx.run, host: ctx.host, tool: "hlo_op_stats" };
  const data = await toolData<HloStatsData>(params, ctx.progress);
  const page = h("div", { id: "hlo-stats-page", className: "xla-page" }, xlaStyle(),
                 h("h1", {}, `HLO op stats — ${data.run}${ctx.host ? " — " + ctx.host : ""}`));
  if (!data.ops.length) {
    page.append(h("p", { className: "card", id: "no-xla" }, "No XLA ops in this run."));
    return page;
  }
  const table = new SortableTable<OpRow>(COLUMNS, data.ops, 2000, "hlo-table");
  const filter = h("input", { type: "search", id: "hlo-filter", placeholder: "Filter by op, program or category",
                              "aria-label": "Filter by op, program or category" });
  const bound = h("select", { id: "hlo-bound", "aria-label": "Bound by" },
    ...["all", "compute", "memory", "other"].map((b) => h("option", { value: b }, b === "all" ? "any bound" : b)));
  const apply = () => {
    const needle = filter.value.toLowerCase();
    const b = bound.value;
    table.setFilter((r) => (b === "all" || r.bound_by === b) &&
      (r.name.toLowerCase().includes(needle) || r.module.toLowerCase().includes(needle) ||
       r.category.toLowerCase().includes(needle)));
  };
  filter.addEventListener("input", apply);
  bound.addEventListener("change", apply);
  page.append(...data.notes.map((n) => h("p", { className: "note" }, n)),
    h("section", { className: "card wide" },
      h("div", { className: "controls" }, filter, bound,
        h("a", { id: "export-csv", href: apiUrl("csv", params), download: "" }, "Export as CSV")),
      table.element));
  return page;
}

// GPU kernel stats: a pie of the kernels with most time, and the table of every kernel, op
// and launch shape (sortable, filterable, exportable as CSV).
import { apiUrl, toolData } from "../api";
import { pie } from "../charts";
import { bytes, h, int, pct } from "../dom";
import { shortName } from "../names";
import { Column, numberColumn, SortableTable } from "../table";
import type { PageContext } from "./registry";

interface KernelRow {
  kernel: string; op: string; registers_per_thread: number | null;
  shared_memory_bytes: number | null; block: number[] | null; grid: number[] | null;
  op_tensor_core_eligible: boolean; kernel_uses_tensor_core: boolean; occurrences: number;
  total_us: number; avg_us: number; min_us: number; max_us: number; percent: number;
}
interface KernelStats { run: string; host: string | null; total_us: number;
  implausible_launches: number; rows: KernelRow[];
  pie: { kernel: string; total_us: number; percent: number }[]; }

const us = (v: number) => v.toFixed(3);
const opt = (v: number | null) => (v === null ? "–" : String(v));
const dims = (d: number[] | null) => (d ? d.join("×") : "–");
const yes = (b: boolean) => (b ? "yes" : "no");
const num = (key: keyof KernelRow, title: string, f: (v: number) => string = us) =>
  numberColumn<KernelRow>(key, title, f);

const COLUMNS: Column<KernelRow>[] = [
  { key: "kernel", title: "Kernel", value: (r) => r.kernel, format: (r) => shortName(r.kernel),
    className: "name", clip: true },
  { key: "op", title: "Op", value: (r) => r.op, className: "name" },
  { key: "registers_per_thread", title: "Registers/thread", numeric: true,
    value: (r) => r.registers_per_thread ?? -1, format: (r) => opt(r.registers_per_thread) },
  { key: "shared_memory_bytes", title: "Shared memory", numeric: true,
    value: (r) => r.shared_memory_bytes ?? -1,
    format: (r) => (r.shared_memory_bytes === null ? "–" : bytes(r.shared_memory_bytes)) },
  { key: "block", title: "Block dim", value: (r) => dims(r.block) },
  { key: "grid", title: "Grid dim", value: (r) => dims(r.grid) },
  { key: "op_tensor_core_eligible", title: "Op TC eligible",
    value: (r) => yes(r.op_tensor_core_eligible) },
  { key: "kernel_uses_tensor_core", title: "Kernel uses TC",
    value: (r) => yes(r.kernel_uses_tensor_core) },
  num("occurrences", "Occurrences", int),
  num("total_us", "Total (µs)"),
  num("avg_us", "Avg (µs)"),
  num("min_us", "Min (µs)"),
  num("max_us", "Max (µs)"),
  num("percent", "% of kernel time", pct),
];

export async function renderKernels(ctx: PageContext): Promise<HTMLElement> {
  const params = { run: ctx.run, host: ctx.host, tool: "kernel_stats" };
  const data = await toolData<KernelStats>(params, ctx.progress);
  const title = h("h1", {}, `GPU kernel stats — ${data.run}${data.host ? " — " + data.host : ""}`);
  if (!data.rows.length) {
    return h("div", { id: "kernels-page" }, title,
      h("p", { className: "card", id: "no-kernels" },
        "No GPU kernels in this profile: it was recorded without a GPU, or without device ",
        "tracing (device_tracer_level ≥ 1)."));
  }
  const table = new SortableTable<KernelRow>(COLUMNS, data.rows, 2000, "kernel-table");
  const filter = h("input", { type: "search", id: "kernel-filter",
                              placeholder: "Filter by kernel or op name",
                              "aria-label": "Filter by kernel or op name" });
  filter.addEventListener("input", () => {
    const needle = filter.value.toLowerCase();
    table.setFilter((r) => r.kernel.toLowerCase().includes(needle) ||
                           r.op.toLowerCase().includes(needle));
  });
  return h("div", { id: "kernels-page" }, title,
    data.implausible_launches
      ? h("p", { className: "warning" }, `${int(data.implausible_launches)} launches gave ` +
          "figures out of any GPU's bounds; those figures are shown as –.")
      : null,
    h("div", { className: "card wide" },
      pie("pie-kernels", "Top kernels by total time",
          data.pie.map((s) => ({ name: s.kernel, value: s.total_us / 1000 })), 11)),
    h("section", { className: "card wide" },
      h("div", { className: "controls" }, filter,
        h("a", { id: "export-csv", href: apiUrl("csv", params), download: "" },
          "Export as CSV")),
      table.element));
}

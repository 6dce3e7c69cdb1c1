// The Diff page: this run against a baseline run of the logdir (the picker at the top):
// step time change with its 95% interval and verdict, per-step times of both, the breakdown,
// the ops and kernels that changed most, memory peaks and hosts.
import type { Progress } from "../../api";
import { bytes, h, ms, svg } from "../../dom";
import { Column, SortableTable } from "../../table";
import type { PageContext } from "../registry";
import { Change, Diff, fetchDiff, otherRuns, rememberBase, rememberedBase, signed, signedPct,
         StepShift } from "./data";

const CSS = `
#diff-page .verdict { font-size: 1.15rem; font-weight: 600; }
#diff-page .verdict.slower { color: #c5221f; }
#diff-page .verdict.faster { color: #188038; }
#diff-page .controls { display: flex; gap: .8rem; align-items: center; flex-wrap: wrap; }
#diff-page td.up { color: #c5221f; }
#diff-page td.down { color: #188038; }
#diff-page .legend span { margin-right: 1rem; }
#diff-page .swatch { display: inline-block; width: .8rem; height: .8rem; margin-right: .3rem;
  vertical-align: middle; }
`;

const BASE_COLOR = "#9aa0a6";
const NEW_COLOR = "#1a73e8";

function verdictText(s: StepShift): string {
  if (s.delta_ms === null) return "No steps on one side: step times cannot be compared.";
  if (s.ci_percent === null) return "Too few steps to tell a change from noise.";
  return { slower: "Slower", faster: "Faster", "no change": "No change beyond noise" }[s.verdict]
    ?? s.verdict;
}

function stepCard(d: Diff): HTMLElement {
  const s = d.step_time;
  const ci = s.ci_percent;
  return h("section", { className: "card wide", id: "diff-step" },
    h("h2", {}, "Step time"),
    h("p", { className: `verdict ${s.verdict.replace(" ", "-")}`, id: "diff-verdict",
             "data-verdict": s.verdict }, verdictText(s)),
    h("p", { id: "diff-step-text" },
      `Median ${ms(s.base.median_ms)} ms (${s.base.count} steps of ${d.base}) → `,
      `${ms(s.new.median_ms)} ms (${s.new.count} steps of ${d.run}); change `,
      h("strong", { id: "diff-change" }, `${signed(s.delta_ms)} ms ${signedPct(s.percent)}`),
      ci ? `, 95% confidence interval ${signedPct(ci[0])} to ${signedPct(ci[1])}.` : "."),
    stepChart(d),
    ...d.notes.map((n) => h("p", { className: "note" }, n)));
}

/** The per-step times of both runs, one line each, step by step. */
function stepChart(d: Diff): HTMLElement | null {
  const { base, new: fresh } = d.step_ms;
  const n = Math.max(base.length, fresh.length);
  if (n < 2) return null;
  const W = 720, H = 180, P = 36;
  const top = Math.max(...base, ...fresh) * 1.05 || 1;
  const x = (i: number) => P + (i * (W - 2 * P)) / (n - 1);
  const y = (v: number) => H - P / 2 - (v / top) * (H - P);
  const line = (values: number[], color: string, id: string) => svg("polyline", {
    id, fill: "none", stroke: color, "stroke-width": 1.5,
    points: values.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ") });
  const chart = svg("svg", { id: "diff-step-chart", viewBox: `0 0 ${W} ${H}`, width: "100%",
                             role: "img", "aria-label": "Step times of both runs" },
    svg("line", { x1: P, y1: y(0), x2: W - P / 2, y2: y(0), stroke: "#dadce0" }),
    svg("text", { x: 2, y: y(top / 1.05) + 4, "font-size": 11 }, `${(top / 1.05).toFixed(1)}`),
    svg("text", { x: 2, y: y(0), "font-size": 11 }, "0 ms"),
    line(base, BASE_COLOR, "diff-line-base"), line(fresh, NEW_COLOR, "diff-line-new"));
  return h("div", {}, chart,
    h("p", { className: "legend muted" },
      h("span", {}, h("i", { className: "swatch", style: `background:${BASE_COLOR}` }),
        `base ${d.base}`),
      h("span", {}, h("i", { className: "swatch", style: `background:${NEW_COLOR}` }),
        `new ${d.run}`), "ms per step, in step order"));
}

function changeColumns(unit: "ms" | "bytes", withShare: boolean): Column<Change>[] {
  const fmt = unit === "bytes" ? (v: number | null) => (v === null ? "–" : bytes(v))
    : (v: number | null) => ms(v);
  const delta = unit === "bytes"
    ? (c: Change) => (c.delta < 0 ? "−" : "+") + bytes(Math.abs(c.delta)) : (c: Change) => signed(c.delta);
  const cols: Column<Change>[] = [
    { key: "name", title: "Name", value: (c) => c.name, className: "name", clip: true },
    { key: "detail", title: "", value: (c) => c.detail },
    { key: "base", title: `Base (${unit === "ms" ? "ms/step" : "peak"})`, numeric: true,
      value: (c) => c.base ?? -1, format: (c) => fmt(c.base) },
    { key: "new", title: `New (${unit === "ms" ? "ms/step" : "peak"})`, numeric: true,
      value: (c) => c.new ?? -1, format: (c) => fmt(c.new) },
    { key: "delta", title: "Change", numeric: true, value: (c) => c.delta, format: delta,
      className: "delta" },
    { key: "percent", title: "%", numeric: true, value: (c) => c.percent ?? 0,
      format: (c) => signedPct(c.percent) },
  ];
  if (withShare) {
    cols.push({ key: "share", title: "Share of change", numeric: true,
                value: (c) => c.share_percent ?? 0,
                format: (c) => (c.share_percent === null ? "" : `${c.share_percent.toFixed(0)}%`) });
  }
  cols.push({ key: "status", title: "", value: (c) => c.status === "added" || c.status === "removed"
    ? c.status : c.beyond_noise === false ? "inside noise" : c.beyond_noise === null ? "?" : c.status });
  return cols;
}

function colour(table: SortableTable<Change>): void {
  for (const td of Array.from(table.element.querySelectorAll<HTMLElement>("td.delta"))) {
    const v = Number(td.dataset.value);
    td.classList.toggle("up", v > 0);
    td.classList.toggle("down", v < 0);
  }
}

function changeTable(id: string, title: string, rows: Change[], unit: "ms" | "bytes",
                     withShare: boolean, empty: string): HTMLElement {
  const changed = rows.filter((c) => c.delta !== 0 || unit === "bytes");
  const section = h("section", { className: "card wide", id }, h("h2", {}, title));
  if (!changed.length) {
    section.append(h("p", { className: "muted" }, empty));
    return section;
  }
  const table = new SortableTable<Change>(changeColumns(unit, withShare), changed, 500, `${id}-table`);
  colour(table);
  section.append(table.element);
  return section;
}

function hostsCard(d: Diff): HTMLElement | null {
  if (d.hosts.length < 2 && !d.straggler.base && !d.straggler.new) return null;
  return h("section", { className: "card wide", id: "diff-hosts" }, h("h2", {}, "Hosts"),
    h("p", { id: "diff-straggler" }, "Most often the straggler: ",
      h("strong", {}, d.straggler.base ?? "none"), " → ", h("strong", {}, d.straggler.new ?? "none")),
    h("table", {}, h("thead", {}, h("tr", {}, ...["Host", "Base median (ms)", "New median (ms)",
                                                  "Change", "95% CI"].map((t) => h("th", {}, t)))),
      h("tbody", {}, ...d.hosts.map((x) => h("tr", {},
        h("td", { className: "name" }, x.host), h("td", { className: "num" }, ms(x.base.median_ms)),
        h("td", { className: "num" }, ms(x.new.median_ms)),
        h("td", { className: "num" }, signedPct(x.percent)),
        h("td", { className: "num" }, x.ci_percent
          ? `${signedPct(x.ci_percent[0])} to ${signedPct(x.ci_percent[1])}` : "–"))))));
}

function environmentCard(d: Diff): HTMLElement | null {
  const rows = Object.entries(d.environment);
  if (!rows.length && d.input_verdict.base === d.input_verdict.new) return null;
  const show = (v: unknown) => (Array.isArray(v) ? v.join(", ") : String(v ?? "–"));
  return h("section", { className: "card wide", id: "diff-environment" },
    h("h2", {}, "What else differs"),
    h("ul", {},
      d.input_verdict.base !== d.input_verdict.new
        ? h("li", {}, `Input-bound: ${d.input_verdict.base} → ${d.input_verdict.new}`) : null,
      ...rows.map(([k, [b, n]]) => h("li", {}, `${k}: ${show(b)} → ${show(n)}`))));
}

function body(d: Diff): HTMLElement[] {
  return [
    stepCard(d),
    changeTable("diff-breakdown", "Step breakdown (ms per step)", d.breakdown_ms_per_step, "ms",
                true, "No steps: no breakdown."),
    changeTable("diff-ops", "Ops, by how much of the change each explains", d.ops, "ms", true,
                "No op changed."),
    ...(d.kernels.length ? [changeTable("diff-kernels", "Kernels", d.kernels, "ms", true,
                                        "No kernel changed.")] : []),
    changeTable("diff-memory", "Peak memory", [...d.memory, ...d.programs], "bytes", false,
                "Neither run recorded memory."),
    hostsCard(d), environmentCard(d),
  ].filter((x): x is HTMLElement => x !== null);
}

export async function renderDiff(ctx: PageContext): Promise<HTMLElement> {
  const runs = await otherRuns(ctx.run);
  const page = h("div", { id: "diff-page" }, h("style", {}, CSS),
    h("h1", {}, `Diff — ${ctx.run}`));
  if (!runs.length) {
    page.append(h("p", { className: "card", id: "diff-no-base" },
      "There is no other run in this logdir to compare this one with. Profile the program ",
      "again (after your change) into the same logdir, or compare any two runs or summaries ",
      "with ", h("code", {}, "stepscope diff BASE NEW"), "."));
    return page;
  }
  const picker = h("select", { id: "diff-base", "aria-label": "Baseline run" },
    ...runs.map((r) => h("option", { value: r }, r)));
  picker.value = rememberedBase(runs);
  const content = h("div", { id: "diff-content" });
  page.append(h("div", { className: "card wide controls" },
    h("label", { for: "diff-base" }, "Baseline: "), picker,
    h("span", { className: "muted" }, `compared with ${ctx.run} (the run chosen above)`)),
    content);
  const progress = (p: Progress) => {
    content.replaceChildren(h("p", { className: "muted", id: "diff-loading" },
      `Loading… ${p.total_bytes ? Math.round((100 * p.done_bytes) / p.total_bytes) : 0}%`));
  };
  let asked = 0;
  const load = async () => {
    const mine = ++asked;
    rememberBase(picker.value);
    content.replaceChildren(h("p", { className: "muted", id: "diff-loading" }, "Comparing…"));
    try {
      const d = await fetchDiff(ctx.run, picker.value, progress);
      if (mine !== asked || ctx.stale()) return;
      content.replaceChildren(...body(d));
      content.dataset.base = d.base;
    } catch (err) {
      if (mine !== asked || ctx.stale()) return;
      content.replaceChildren(h("p", { className: "error", role: "alert" },
        err instanceof Error ? err.message : String(err)));
    }
  };
  picker.addEventListener("change", () => void load());
  await load();
  return page;
}

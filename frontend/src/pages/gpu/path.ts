// The critical path section: per step, who bounded it (each rank's mean share of every
// rank's path), and one rank's path as a list of segments with their shares.
import { h, ms, pct } from "../../dom";
import { Column, numberColumn, SortableTable } from "../../table";
import { KIND_COLORS, PathOf, PathStep, Segment } from "./data";

const SEGMENT_COLUMNS: Column<Segment>[] = [
  { key: "host", title: "Rank (host)", value: (s) => s.host, className: "name" },
  { key: "kind", title: "Kind", value: (s) => s.kind },
  { key: "name", title: "What", value: (s) => s.name, className: "name", clip: true },
  numberColumn<Segment>("start_us", "Start (ms)", (v) => ms(v / 1000)),
  numberColumn<Segment>("duration_us", "Duration (ms)", (v) => ms(v / 1000)),
  numberColumn<Segment>("percent", "Share of path", pct),
];

function shareBar(id: string, shares: Record<string, number>, color: (k: string) => string)
    : HTMLElement {
  const bar = h("div", { className: "gpu-bar", id });
  for (const [key, value] of Object.entries(shares)) {
    if (value <= 0) continue;
    bar.append(h("span", { style: `width:${value}%;background:${color(key)}`,
                           title: `${key}: ${value.toFixed(1)}%`, "data-key": key }));
  }
  return bar;
}

const PALETTE = ["#3b7dd8", "#e0803a", "#2e9e6a", "#c0504d", "#8e6bbf", "#d4a82a", "#4bacc6",
                 "#7f7f7f"];

export function pathSection(steps: PathStep[]): HTMLElement {
  const section = h("section", { className: "card wide", id: "gpu-path" },
                    h("h2", {}, "Critical path across ranks"));
  if (!steps.length) {
    section.append(h("p", { className: "note" }, "No step has a path (no steps and no work)."));
    return section;
  }
  const hostColor = new Map<string, string>();
  const colorOf = (host: string) => {
    if (!hostColor.has(host)) hostColor.set(host, PALETTE[hostColor.size % PALETTE.length]);
    return hostColor.get(host)!;
  };
  const stepSelect = h("select", { id: "gpu-path-step", "aria-label": "Step" },
    ...steps.map((s) => h("option", { value: String(s.step) }, `step ${s.step}`)));
  const rankSelect = h("select", { id: "gpu-path-rank", "aria-label": "Path ending on" });
  const summary = h("div", { id: "gpu-path-summary" });
  const body = h("div", {});
  const table = new SortableTable<Segment>(SEGMENT_COLUMNS, [], 2000, "gpu-path-table");

  const showPath = (path: PathOf) => {
    table.setRows(path.segments);
    body.replaceChildren(
      h("p", {}, `Path ending on ${path.host}: ${ms(path.length_us / 1000)} ms of segments `,
        `(the step took ${ms(path.step_us / 1000)} ms there).`,
        path.segments_left_out ? ` ${path.segments_left_out} short segments left out.` : ""),
      h("p", { className: "muted" }, "By kind:"),
      shareBar("gpu-path-kinds", path.by_kind, (k) => KIND_COLORS[k] ?? "#999"),
      h("p", { className: "muted" }, "By rank:"),
      shareBar("gpu-path-hosts", path.by_host, colorOf),
      table.element);
  };
  const showStep = () => {
    const step = steps.find((s) => String(s.step) === stepSelect.value) ?? steps[0];
    summary.replaceChildren(
      h("p", {}, "Bounded by ",
        h("strong", { id: "gpu-bounded-by", "data-host": step.bounded_by ?? "" },
          step.bounded_by ?? "none"),
        ": the mean share of each rank's work on every rank's path."),
      shareBar("gpu-path-bounding", step.by_host, colorOf),
      h("ul", { className: "gpu-legend" }, ...Object.entries(step.by_host).map(([host, v]) =>
        h("li", {}, h("span", { className: "swatch", style: `background:${colorOf(host)}` }),
          `${host}: ${v.toFixed(1)}%`))));
    const previous = rankSelect.value;
    rankSelect.replaceChildren(...step.paths.map((p) =>
      h("option", { value: p.host }, `path ending on ${p.host}`)));
    if (step.paths.some((p) => p.host === previous)) rankSelect.value = previous;
    const path = step.paths.find((p) => p.host === rankSelect.value) ?? step.paths[0];
    if (path) showPath(path);
  };
  stepSelect.addEventListener("change", showStep);
  rankSelect.addEventListener("change", () => {
    const step = steps.find((s) => String(s.step) === stepSelect.value) ?? steps[0];
    const path = step.paths.find((p) => p.host === rankSelect.value);
    if (path) showPath(path);
  });
  section.append(
    h("p", { className: "muted" }, "Per step, the chain of host ops, launches, kernels and ",
      "collectives that bounded its length, followed backwards from each rank's end; a ",
      "collective goes on at its slowest participant, so a straggler's work shows on every ",
      "rank's path."),
    h("div", { className: "controls" }, stepSelect, rankSelect), summary, body);
  showStep();
  return section;
}

// Pod viewer tables: how often each host was the straggler, and how each host's clock was
// lined up on the reference host's.
import { duration, h, int, pct } from "../../dom";
import { judgedSteps, noun, Pod } from "./data";

/** Hosts by the number of steps in which they were the straggler, most first. */
export function stragglerTable(pod: Pod, top: string | null): HTMLElement {
  const judged = judgedSteps(pod);
  const rows = pod.hosts.map((host, i) => ({ host, i, n: pod.stragglers[host] ?? 0 }))
    .sort((a, b) => b.n - a.n || a.i - b.i);
  const who = noun(pod);
  return h("table", { id: "pod-stragglers" },
    h("thead", {}, h("tr", {}, h("th", {}, who[0].toUpperCase() + who.slice(1)),
      h("th", { className: "num" }, "Steps as straggler"),
      h("th", { className: "num" }, "Share of steps"))),
    h("tbody", {}, ...rows.map((r) => h("tr", { className: r.host === top ? "pod-top" : undefined,
                                               "data-host": r.host },
      h("td", { className: "name" }, r.host),
      h("td", { className: "num", "data-value": String(r.n) }, int(r.n)),
      h("td", { className: "num" }, judged ? pct((100 * r.n) / judged) : "–")))));
}

/** Each host's clock shift, how it was found and why. */
export function alignmentTable(pod: Pod): HTMLElement {
  const entries = Object.entries(pod.alignment);
  if (!entries.length) return h("p", { className: "muted" }, "No clocks to line up.");
  return h("table", { id: "pod-alignment-table" },
    h("thead", {}, h("tr", {}, h("th", {}, "Host"), h("th", { className: "num" }, "Shift"),
      h("th", {}, "Method"), h("th", {}, "Reason"))),
    h("tbody", {}, ...entries.map(([host, a]) => h("tr", { "data-host": host },
      h("td", { className: "name" }, host),
      h("td", { className: "num", "data-value": String(a.shift_ns) }, duration(a.shift_ns)),
      h("td", { "data-key": "method" }, a.method.replace(/_/g, " ")),
      h("td", {}, a.reason)))));
}

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

/** Each host's model FLOPs utilisation (MFU) over its steps, or why it is unknown. */
export function mfuTable(pod: Pod): HTMLElement {
  const hosts = Object.entries(pod.mfu?.hosts ?? {});
  if (!hosts.length) return h("p", { className: "muted" }, "No MFU for this run.");
  return h("table", { id: "pod-mfu" },
    h("thead", {}, h("tr", {}, h("th", {}, "Host"), h("th", {}, "Device"),
      h("th", { className: "num" }, "Model TFLOP"), h("th", { className: "num" }, "Step time"),
      h("th", { className: "num" }, "Peak TFLOP/s"), h("th", { className: "num" }, "MFU"))),
    h("tbody", {}, ...hosts.map(([host, m]) => h("tr", { "data-host": host },
      h("td", { className: "name" }, host),
      h("td", {}, m.devices > 1 ? `${m.devices} × ${m.device || "?"}` : m.device || "?"),
      h("td", { className: "num" }, m.model_tflop.toPrecision(4)),
      h("td", { className: "num" }, duration(m.step_ms * 1e6)),
      h("td", { className: "num", title: m.peak_source },
        m.peak_tflops === null ? "unknown" : String(m.peak_tflops)),
      h("td", { className: "num", "data-value": String(m.mfu), title: m.unknown },
        m.mfu === null ? "unknown" : pct(100 * m.mfu))))));
}

// The overview's Python card: how much of each step the steps' thread spent in Python code
// (self time of Python frames) and the heaviest functions, per host with Python data.
import { h, pct } from "../../dom";
import type { PageContext } from "../registry";
import { label } from "./flame";

export interface PythonSummary { source: string; total_ns: number; thread: string | null;
  step_num: number[]; step_python_ns: number[];
  top: { name: string[]; function: string[]; self_share: number[]; total_share: number[] }; }

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.floor(s.length / 2)] : 0;
}

/** The card, or null when no host recorded Python data. ``steps`` are the run's step times
 * (ms) by step number. */
export function pythonCard(python: Record<string, PythonSummary> | undefined, ctx: PageContext,
                           steps: { step_num: number; ms: number }[]): HTMLElement | null {
  const stepMs = new Map(steps.map((s) => [s.step_num, s.ms]));
  const hosts = Object.entries(python ?? {});
  if (!hosts.length) return null;
  const tool = ctx.tools.find((t) => t.name === "python_profile");
  return h("section", { className: "card", id: "python-summary" },
    h("h2", {}, "Python on the host"),
    ...hosts.map(([host, p]) => {
      const shares = p.step_python_ns.map((ns, i) => ns / 1e6 / (stepMs.get(p.step_num[i]) ?? 0))
        .filter((x) => Number.isFinite(x));
      const share = shares.length ? 100 * median(shares) : null;
      const heavy = p.top.function.slice(0, 3).map((_, i) =>
        `${label(p.top.name[i])} (${pct(100 * p.top.self_share[i])})`);
      return h("div", { "data-host": host },
        share !== null
          ? h("p", {}, h("strong", { className: "py-step-share", "data-value": String(share) },
              pct(share)),
            ` of a step (median) in Python code on ${p.thread ?? "the step thread"}` +
            `${hosts.length > 1 ? ` of ${host}` : ""} (${p.source}).`)
          : h("p", {}, `Python ${p.source} data on ${host}; no steps to share it by.`),
        h("p", { className: "py-heaviest" }, `Heaviest functions (self time): ${heavy.join(", ")}.`));
    }),
    tool ? h("p", {}, h("a", { href: "#", id: "open-python", onclick: (e: Event) => {
      e.preventDefault(); ctx.go("python_profile"); } }, `Open ${tool.title} →`)) : null);
}

// The baseline picker other pages share with the Diff page: a select of the logdir's other
// runs (and "none"), remembered for the browser tab, and the comparison it leads to.
import { h } from "../../dom";
import type { PageContext } from "../registry";
import { Change, Diff, fetchDiff, forgetBase, keptBase, otherRuns, rememberBase } from "./data";

/** The runs a page may compare with (none when they cannot be listed). Ask before drawing
 * charts: they draw on the next frame, and a page awaiting after that would miss it. */
export function baselineRuns(ctx: PageContext): Promise<string[]> {
  return otherRuns(ctx.run).catch(() => []);
}

/**
 * A "Compare with baseline" bar over ``runs``, or null when there are none. ``show`` gets the
 * comparison with the chosen baseline (null: none chosen), once the bar is on the page and at
 * every change.
 */
export function baselineBar(ctx: PageContext, runs: string[], id: string,
                            show: (d: Diff | null) => void): HTMLElement | null {
  if (!runs.length) return null;
  const picker = h("select", { id, "aria-label": "Baseline run" },
    h("option", { value: "" }, "none"), ...runs.map((r) => h("option", { value: r }, r)));
  picker.value = keptBase(runs);
  const state = h("span", { className: "muted", "aria-live": "polite" });
  let asked = 0;
  const load = async () => {
    const mine = ++asked;
    if (!picker.value) {
      forgetBase();
      state.textContent = "";
      show(null);
      return;
    }
    rememberBase(picker.value);
    state.textContent = "comparing…";
    try {
      const d = await fetchDiff(ctx.run, picker.value, () => undefined);
      if (mine !== asked || ctx.stale()) return;
      state.textContent = `deltas: this run − ${d.base}, per step, all hosts`;
      show(d);
    } catch (err) {
      if (mine !== asked || ctx.stale()) return;
      state.textContent = err instanceof Error ? err.message : String(err);
      show(null);
    }
  };
  picker.addEventListener("change", () => void load());
  requestAnimationFrame(() => void load());  // once the page holds the bar and its target
  return h("div", { className: "controls baseline-bar" },
    h("label", { for: id }, "Compare with baseline: "), picker, state);
}

/** An op's change in a comparison, by its side and name (host ops: "Host", device: "Device"). */
export function opChanges(d: Diff): Map<string, Change> {
  return new Map(d.ops.map((c) => [`${c.side}:${c.name}`, c]));
}

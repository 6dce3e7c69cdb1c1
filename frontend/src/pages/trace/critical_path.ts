// The critical path overlay: a switch that fetches the run's GPU timeline and draws this
// host's segments of the paths that end on it as bands over the timeline.
import { toolData } from "../../api";
import { h } from "../../dom";
import type { GpuTimeline } from "../gpu/data";
import type { PageContext } from "../registry";
import type { Painter } from "./draw";
import type { Band, TraceState } from "./state";

/** This host's own segments of the paths ending on it, in view ns (each host's segments are
 * on its own clock: only this host's can be drawn on its timeline). */
export function bandsOf(data: GpuTimeline, host: string, originNs: number): Band[] {
  const origin = data.critical_path.origin_ns[host];
  if (origin === undefined) return [];
  const out: Band[] = [];
  for (const step of data.critical_path.steps) {
    for (const path of step.paths) {
      if (path.host !== host) continue;
      for (const seg of path.segments) {
        if (seg.host !== host) continue;
        const start = origin - originNs + seg.start_us * 1e3;
        out.push({ start, end: start + seg.duration_us * 1e3, kind: seg.kind, name: seg.name });
      }
    }
  }
  return out;
}

/** The switch (null where the run has no GPU timeline). */
export function criticalPathSwitch(ctx: PageContext, s: TraceState, painter: Painter)
    : HTMLElement | null {
  if (!ctx.tools.some((t) => t.name === "gpu_timeline")) return null;
  const box = h("input", { type: "checkbox", id: "trace-critical-path" });
  const note = h("span", { className: "muted", id: "trace-critical-path-note" });
  box.addEventListener("change", () => {
    if (!box.checked) {
      s.overlay = [];
      note.textContent = "";
      painter.draw();
      return;
    }
    note.textContent = "loading…";
    void toolData<GpuTimeline>({ run: ctx.run, host: "", tool: "gpu_timeline" }, ctx.progress)
      .then((data) => {
        if (!box.checked) return;
        s.overlay = bandsOf(data, s.meta.host, s.meta.origin_ns);
        note.textContent = `${s.overlay.length} segments on this host`;
        painter.draw();
      })
      .catch((err: unknown) => { note.textContent = String(err); });
  });
  return h("label", { title: "Draw this host's part of each step's critical path" }, box,
           " Critical path ", note);
}

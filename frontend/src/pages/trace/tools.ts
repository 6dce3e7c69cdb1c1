// Trace viewer tools: the tool bar (select, pan, zoom, timing), moving the view, the details
// panel of a clicked event or a dragged range, and search with stepping through matches.
import { duration, h, int } from "../../dom";
import type { TraceData } from "./data";
import type { Painter } from "./draw";
import { fullView, panned, ROW_H, Tool, TOOL_KEYS, TraceState, trackHeight, View,
         zoomed } from "./state";

// How near (CSS pixels) the pointer must be to a timing interval's end to drag it.
const END_REACH_PX = 6;

function kv(rows: [string, string][]): HTMLElement {
  return h("dl", { className: "kv" }, ...rows.flatMap(([k, v]) => [h("dt", {}, k),
                                                                  h("dd", {}, v)]));
}

export class TraceTools {
  readonly toolBar = h("div", { className: "trace-tools", role: "radiogroup" });
  readonly timingLabel = h("span", { id: "trace-timing" });
  readonly details = h("div", { id: "trace-details", className: "card" },
    h("p", { className: "muted" }, "Click an event for its details; drag to select many."));
  readonly search = h("input", { type: "search", id: "trace-search", placeholder: "Search events",
                                 "aria-label": "Search events by name" });
  readonly matchLabel = h("span", { id: "trace-matches", className: "muted" });
  readonly prev = h("button", { type: "button", id: "trace-prev",
                                onclick: () => void this.runSearch(-1).catch(this.showError) },
                    "◀ Prev");
  readonly next = h("button", { type: "button", id: "trace-next",
                                onclick: () => void this.runSearch(1).catch(this.showError) },
                    "Next ▶");
  readonly reset = h("button", { type: "button", id: "trace-reset",
                                 onclick: () => this.setView(fullView(this.s.meta)) },
                     "Reset view");
  private readonly toolButtons = new Map<Tool, HTMLButtonElement>();
  /** Open another page on a selected range (the Python profile), where the run offers it. */
  onRange: { label: string; open: (a: number, b: number) => void } | null = null;

  constructor(private readonly s: TraceState, private readonly painter: Painter,
              private readonly data: TraceData) {
    for (const [name, key] of TOOL_KEYS) {
      const b = h("button", { id: `trace-tool-${name}`, type: "button", role: "radio",
                              title: `${name} (${key})`, onclick: () => this.setTool(name) }, name);
      this.toolButtons.set(name, b);
      this.toolBar.append(b);
    }
    this.setTool("select");
    painter.el.flowToggle.addEventListener("change", () => {
      this.s.flows = painter.el.flowToggle.checked ? "on" : "off";
      this.painter.draw();
    });
    this.search.addEventListener("keydown", (e) => {
      if (e.key === "Enter") void this.runSearch(e.shiftKey ? -1 : 1).catch(this.showError);
    });
  }

  readonly showError = (err: unknown): void => {
    this.details.replaceChildren(h("p", { className: "error", role: "alert" },
      err instanceof Error ? err.message : String(err)));
  };

  setTool(t: Tool): void {
    this.s.tool = t;
    for (const [name, b] of this.toolButtons) b.setAttribute("aria-checked", String(name === t));
    this.painter.el.canvas.dataset.tool = t;
  }

  /** Show ``v``: draw what is at hand now, fetch its window once the view rests. */
  setView(v: View): void {
    this.s.view = v;
    this.changed();
  }

  changed(): void {
    this.painter.draw();
    this.data.refreshSoon(this.showError);
  }

  zoom(factor: number, at: number): void { this.setView(zoomed(this.s.view, factor, at)); }

  pan(share: number): void { this.setView(panned(this.s.view, share)); }

  /** Set the timing interval between two times. */
  time(a: number, b: number): void {
    this.s.timing = [a, b];
    this.timingLabel.textContent = `Interval: ${duration(b - a)}`;
    this.painter.draw();
  }

  /** Clear the timing interval. */
  clearTiming(): void {
    this.s.timing = null;
    this.timingLabel.textContent = "";
    this.painter.draw();
  }

  /** Which end of the timing interval (0 start, 1 end) is within reach of canvas x. */
  timingEndAt(x: number): 0 | 1 | null {
    const timing = this.s.timing;
    if (!timing) return null;
    const [da, db] = timing.map((t) => Math.abs(this.painter.xOf(t) - x));
    if (Math.min(da, db) > END_REACH_PX) return null;
    return da <= db ? 0 : 1;
  }

  /** The smallest event of the last window under canvas point (x, y). */
  hit(x: number, y: number): number | null {
    const { data, view } = this.s;
    if (!data) return null;
    const ev = data.events;
    const t = this.painter.tOf(x);
    const slack = 2 * (view.t1 - view.t0) / this.painter.width();
    let best: number | null = null;
    for (let i = 0; i < ev.id.length; i++) {
      const ty = this.painter.yOf(ev.track[i], ev.row[i]);
      if (ty === null || y < ty || y >= ty + ROW_H) continue;
      if (t >= ev.start[i] - slack && t <= ev.start[i] + ev.dur[i] + slack) {
        if (best === null || ev.dur[best] > ev.dur[i]) best = i;
      }
    }
    return best === null ? null : ev.id[best];
  }

  async selectEvent(id: number): Promise<void> {
    const d = await this.data.event(id);
    this.s.selected = d;
    const flowList = d.flows.map((f) => {
      const other = f.from.id === d.id ? f.to : f.from;
      const dir = f.from.id === d.id ? "to" : "from";
      return h("li", {}, h("button", { type: "button", className: "linkish trace-flow",
                                       onclick: () => void this.goTo(other.id, 0)
                                         .catch(this.showError) },
        `${f.kind} flow ${dir} event ${other.id} (${this.s.tracks[other.track].name}, ` +
        `${duration(other.time)})`));
    });
    this.details.replaceChildren(
      h("h2", { id: "trace-detail-name" }, d.name),
      kv([["Start", duration(d.start_ns)], ["Duration", duration(d.duration_ns)],
          ["Track", `${d.section} › ${d.track_name}`],
          ...Object.entries(d.stats).map(([k, v]): [string, string] => [k, String(v)])]),
      ...(flowList.length ? [h("div", {}, h("h3", {}, "Flows"),
                                 h("ul", { id: "trace-flows" }, ...flowList))] : []));
    this.painter.draw();
  }

  /** Summarise the events between times a and b on the tracks between canvas y0 and y1. */
  async selectRange(a: number, b: number, y0: number, y1: number): Promise<void> {
    const scrollTop = this.painter.el.scroller.scrollTop;
    const top = Math.min(y0, y1) + scrollTop;
    const bottom = Math.max(y0, y1) + scrollTop;
    const ids = [...this.s.trackY.entries()]
      .filter(([id, y]) => y < bottom && y + trackHeight(this.s.tracks[id]) > top)
      .map(([id]) => id);
    if (!ids.length) return;
    const sel = await this.data.selection(a, b, ids);
    this.s.selected = null;
    this.details.replaceChildren(
      h("h2", {}, `${int(sel.events)} events selected (${duration(b - a)})`),
      h("table", { id: "trace-selection" },
        h("thead", {}, h("tr", {}, h("th", {}, "Name"), h("th", {}, "Count"),
                         h("th", {}, "Total"), h("th", {}, "Average"))),
        h("tbody", {}, ...sel.rows.slice(0, 500).map((r) => h("tr", {},
          h("td", { className: "name" }, r.name), h("td", {}, int(r.count)),
          h("td", {}, duration(r.total_ns)), h("td", {}, duration(r.average_ns)))))),
      ...(this.onRange
        ? [h("button", { type: "button", id: "trace-range-python",
                         onclick: () => this.onRange?.open(a, b) }, this.onRange.label)]
        : []));
    this.painter.draw();
  }

  /** Bring event ``id`` into view (its section opened, at least ``dur`` shown) and select it. */
  async goTo(id: number, dur: number): Promise<void> {
    const d = await this.data.event(id);
    const section = this.s.tracks[d.track].section;
    if (this.s.collapsed.delete(section)) this.painter.buildGutter();
    const span = Math.max(d.duration_ns * 3, 1000, dur);
    this.s.view = { t0: d.start_ns - span / 3, t1: d.start_ns - span / 3 + span };
    const y = this.s.trackY.get(d.track) ?? 0;
    const scroller = this.painter.el.scroller;
    scroller.scrollTop = Math.max(y + d.row * ROW_H - scroller.clientHeight / 2, 0);
    this.changed();
    await this.selectEvent(id);
  }

  /** Go to the next (``step`` 1) or previous (-1) match of the search box's text. */
  async runSearch(step: number): Promise<void> {
    const q = this.search.value.trim();
    if (!q) return;
    const { matches, fresh } = await this.data.search(q);
    if (fresh) this.s.matchAt = step > 0 ? -1 : 0;
    const m = matches.matches;
    if (Array.isArray(m) || !m.id.length) {
      this.matchLabel.textContent = "no match";
      return;
    }
    this.s.matchAt = (this.s.matchAt + step + m.id.length) % m.id.length;
    this.matchLabel.textContent = `${int(this.s.matchAt + 1)} of ${int(matches.total)}`;
    await this.goTo(m.id[this.s.matchAt], m.dur[this.s.matchAt]);
  }
}

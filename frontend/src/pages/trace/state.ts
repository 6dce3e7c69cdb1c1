// Trace viewer state: what the server says the run holds (sections and tracks), what the
// user looks at (the time window, the tool, the selection, the timing interval) and where
// each shown track sits. Pure data: no DOM, no fetching.

export interface TrackInfo { id: number; section: string; name: string; kind: string; rows: number;
  events: number; }
/** How a host's clock is lined up with the run's other hosts (add shift_ns to compare). */
export interface Clock { shift_ns: number; method: string; reason: string; }
/** ``coarse``: from the overview the server answers with while it builds the index (each
 * events track one row); the page asks again once the windows come from the index. */
export interface Meta { run: string; host: string; hosts: string[]; origin_ns: number; span_ns: number;
  events: number; flows: number; sections: { name: string; pid: number; tracks: number[] }[];
  tracks: TrackInfo[]; clock: Clock; coarse?: boolean; }
export interface End { id: number; track: number; row: number; time: number; }
export interface Flow { kind: string; from: End; to: End; }
/** One answer of the window route: what to draw between two times at one width. */
export interface TimeWindow {
  start_ns: number; end_ns: number; width: number; coarse?: boolean;
  /** A coarse window whose events the server is reading (the next ask has them). */
  events_coming?: boolean;
  events: { track: number[]; row: number[]; start: number[]; dur: number[]; name: number[];
            id: number[] };
  aggregates: { track: number[]; row: number[]; start: number[]; end: number[];
                count: number[]; covered: number[] };
  names: Record<string, string>;
  counters: { track: number; time: number[]; value: number[] }[];
  flows: Flow[]; flows_in_window: number;
  /** The flows are not in this answer yet (the server still sorts them by time): asked again. */
  flows_pending?: boolean;
}
export interface EventDetail { id: number; name: string; start_ns: number; duration_ns: number;
  track: number; row: number; section: string; track_name: string;
  stats: Record<string, unknown>; flows: Flow[]; }
export interface Matches { query: string; total: number;
  matches: { id: number[]; track: number[]; row: number[]; start: number[]; dur: number[] } | []; }
export interface Selection { events: number;
  rows: { name: string; count: number; total_ns: number; average_ns: number }[]; }

export type Tool = "select" | "pan" | "zoom" | "timing";
/** Flow arrows: drawn when the window has at most FLOWS_AUTO_MAX of them ("auto"), or as the
 * user chose. JAX and GPU traces link every launch to its kernel: thousands of arrows hide
 * the events they join. */
export type FlowsShown = "auto" | "on" | "off";
export const FLOWS_AUTO_MAX = 300;
export const TOOL_KEYS: [Tool, string][] = [["select", "1"], ["pan", "2"], ["zoom", "3"],
                                             ["timing", "4"]];
export const ROW_H = 18;
export const COUNTER_H = 40;
export const SECTION_H = 24;
export const TRACK_PAD = 4;
export const AXIS_H = 28;

/** The shown time range, in nanoseconds from the run's origin. */
export interface View { t0: number; t1: number; }

/** A mouse drag in progress (canvas coordinates), with the view it started from. */
export interface Drag { x: number; y: number; t0: number; t1: number; scroll: number;
  moved: boolean; x1: number; y1: number;
  /** Zoom tool, once moved: "range" (across: zoom to the dragged span) or "scale" (up or
   * down: zoom in or out around the pointer). */
  zoom: "range" | "scale" | null;
  /** Timing tool: the time that stays put while the other end follows the pointer. */
  fixed: number; }

export interface TraceState {
  meta: Meta; // replaced once when the coarse overview's meta gives way to the index's
  tracks: TrackInfo[];
  readonly collapsed: Set<string>; // section names
  view: View;
  tool: Tool;
  data: TimeWindow | null; // the last window fetched
  selected: EventDetail | null;
  timing: [number, number] | null;
  drag: Drag | null;
  matchAt: number; // the search match shown
  flows: FlowsShown;
  readonly trackY: Map<number, number>; // track id → y of its first row (content coords)
  overlay: Band[]; // spans drawn across every track (the critical path's segments)
}

/** A span drawn across the timeline (view ns), coloured by kind. */
export interface Band { start: number; end: number; kind: string; name: string; }

/** The whole run. */
export function fullView(meta: Meta): View {
  return { t0: 0, t1: Math.max(meta.span_ns, 1) };
}

/** Where a view lies on the run's lined-up clock (ns), to show the same moment on another
 * host; and the view that is on this host's trace. */
export function alignedOf(meta: Meta, view: View): View {
  const at = meta.origin_ns + (meta.clock?.shift_ns ?? 0);
  return { t0: view.t0 + at, t1: view.t1 + at };
}

export function viewOfAligned(meta: Meta, aligned: View): View {
  const at = meta.origin_ns + (meta.clock?.shift_ns ?? 0);
  return { t0: aligned.t0 - at, t1: aligned.t1 - at };
}

export function createState(meta: Meta): TraceState {
  return { meta, tracks: meta.tracks, collapsed: new Set(), view: fullView(meta), tool: "select",
           data: null, selected: null, timing: null, drag: null, matchAt: -1,
           flows: "auto", trackY: new Map(), overlay: [] };
}

/** Whether the window's flow arrows are drawn (the selected event's always are). */
export function flowsDrawn(s: TraceState): boolean {
  if (s.flows !== "auto") return s.flows === "on";
  return (s.data?.flows_in_window ?? 0) <= FLOWS_AUTO_MAX;
}

export function trackHeight(t: TrackInfo): number {
  return t.kind === "counter" ? COUNTER_H : Math.max(t.rows, 1) * ROW_H + TRACK_PAD;
}

export type GutterItem = { kind: "section"; name: string; pid: number; open: boolean }
  | { kind: "track"; id: number };

/** The gutter's items top to bottom; fills ``trackY`` for the shown tracks. */
export function layout(s: TraceState): GutterItem[] {
  s.trackY.clear();
  const items: GutterItem[] = [];
  let y = 0;
  for (const section of s.meta.sections) {
    const open = !s.collapsed.has(section.name);
    items.push({ kind: "section", name: section.name, pid: section.pid, open });
    y += SECTION_H;
    if (!open) continue;
    for (const id of section.tracks) {
      items.push({ kind: "track", id });
      s.trackY.set(id, y);
      y += trackHeight(s.tracks[id]);
    }
  }
  return items;
}

/** How much a zoom drag of ``dy`` pixels scales the span: up (negative) zooms in, down
 * zooms out, by e (2.7×) per 100 pixels, whatever the steps the pointer moved in. */
export function dragZoomFactor(dy: number): number {
  return Math.exp(dy / 100);
}

/** Zoom by ``factor`` keeping time ``at`` where it is (at least 10 ns shown). */
export function zoomed(v: View, factor: number, at: number): View {
  const span = Math.max((v.t1 - v.t0) * factor, 10);
  const share = (at - v.t0) / (v.t1 - v.t0);
  return { t0: at - share * span, t1: at - share * span + span };
}

/** Move by ``share`` of the shown span. */
export function panned(v: View, share: number): View {
  const d = (v.t1 - v.t0) * share;
  return { t0: v.t0 + d, t1: v.t1 + d };
}

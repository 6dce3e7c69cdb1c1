// Trace viewer data: the /api/trace/* routes (asked again while the server answers 202, the
// index still being built), the window with a margin either side so that panning draws at
// once (asked again while it comes from the coarse overview, until the index answers, and
// while its flows are still being sorted on the server), and the last search's matches kept
// for stepping through them.
import { apiUrl, ApiError } from "../../api";
import type { PageContext } from "../registry";
import type { EventDetail, Matches, Selection, TimeWindow, View } from "./state";

async function fetchTrace<T>(view: string, params: Record<string, string>): Promise<T> {
  for (;;) {
    const response = await fetch(apiUrl(`trace/${view}`, params),
                                 { headers: { Accept: "application/json" } });
    const body = await response.json().catch(() => ({ error: response.statusText }));
    if (!response.ok) throw new ApiError(response.status, body?.error ?? response.statusText);
    if (response.status !== 202) return body as T;
    await new Promise((r) => setTimeout(r, 200));
  }
}

export class TraceData {
  /** A window request is under way. */
  fetching = false;
  /** The last window came from the server's coarse overview (its index still building). */
  coarse = false;
  /** And the server was reading its events meanwhile (asked again sooner). */
  eventsComing = false;
  /** The last window's flows were still being sorted by time on the server. */
  flowsPending = false;
  /** Told of a failed window request made to refine the coarse one. */
  onError: (err: unknown) => void = () => {};
  private wanted = false;
  private pending = 0;
  private matches: Matches | null = null;
  private readonly base: Record<string, string>;

  /**
   * ``view`` and ``width`` say what is shown when a window is asked for; ``onWindow`` gets
   * each window that arrives while the page is still current.
   */
  constructor(private readonly ctx: PageContext, host: string,
              private readonly view: () => View, private readonly width: () => number,
              private readonly onWindow: (w: TimeWindow) => void,
              private readonly onRefined: () => Promise<void> = async () => {}) {
    this.base = { run: ctx.run, host };
  }

  /** Fetch the window around the view (again, once, if the view moved meanwhile). */
  async refresh(): Promise<void> {
    if (this.fetching) { this.wanted = true; return; }
    this.fetching = true;
    try {
      do {
        this.wanted = false;
        const v = this.view();
        const span = v.t1 - v.t0;
        const start = Math.floor(v.t0 - span / 2);
        const end = Math.ceil(v.t1 + span / 2);
        const w = Math.min(Math.round(this.width() * 2), 20000);
        const answer = await fetchTrace<TimeWindow>("window", { ...this.base,
          start_ns: String(start), end_ns: String(Math.max(end, start + 1)), width: String(w) });
        if (this.ctx.stale()) return;
        // The first answer from the index: its tracks' rows replace the overview's first.
        if (this.coarse && !answer.coarse) await this.onRefined();
        if (this.ctx.stale()) return;
        this.coarse = answer.coarse === true;
        this.eventsComing = answer.events_coming === true;
        this.flowsPending = answer.flows_pending === true;
        this.onWindow(answer);
      } while (this.wanted);
    } finally {
      this.fetching = false;
    }
    if (this.coarse && !this.ctx.stale()) {
      this.refreshSoon(this.onError, this.eventsComing ? 100 : 300);
    }
    else if (this.flowsPending && !this.ctx.stale()) this.refreshSoon(this.onError, 150);
  }

  /** ``refresh`` once the view has stopped moving for ``ms`` (40) ms. */
  refreshSoon(onError: (err: unknown) => void, ms = 40): void {
    window.clearTimeout(this.pending);
    this.pending = window.setTimeout(() => void this.refresh().catch(onError), ms);
  }

  event(id: number): Promise<EventDetail> {
    return fetchTrace<EventDetail>("event", { ...this.base, id: String(id) });
  }

  selection(a: number, b: number, tracks: number[]): Promise<Selection> {
    return fetchTrace<Selection>("selection", { ...this.base, start_ns: String(Math.floor(a)),
      end_ns: String(Math.ceil(b)), tracks: tracks.join(",") });
  }

  /** The matches of query ``q``; ``fresh`` when they were fetched now, not kept. */
  async search(q: string): Promise<{ matches: Matches; fresh: boolean }> {
    if (this.matches && this.matches.query === q) return { matches: this.matches, fresh: false };
    this.matches = await fetchTrace<Matches>("search", { ...this.base, q });
    return { matches: this.matches, fresh: true };
  }
}

// Trace viewer input: the mouse (click, drag as the current tool says, wheel) and the
// keyboard (W/S zoom, A/D pan, 1–4 pick a tool), wired to the tools. The zoom tool zooms to
// a span dragged across, or in and out around the pointer while dragged up or down (as
// Catapult's does); the timing tool's drag makes an interval or moves one of its ends, and
// its click clears the interval.
import type { Painter } from "./draw";
import { Drag, dragZoomFactor, TraceState, zoomed } from "./state";
import type { TraceTools } from "./tools";

export function bindInput(s: TraceState, painter: Painter, tools: TraceTools): void {
  const { canvas, scroller } = painter.el;
  const local = (e: MouseEvent) => {
    const r = canvas.getBoundingClientRect();
    return { x: e.clientX - r.left, y: e.clientY - r.top };
  };
  canvas.addEventListener("mousedown", (e) => {
    const p = local(e);
    const drag: Drag = { x: p.x, y: p.y, t0: s.view.t0, t1: s.view.t1,
                         scroll: scroller.scrollTop, moved: false, x1: p.x, y1: p.y, zoom: null,
                         fixed: painter.tOf(p.x) };
    // On one of the timing interval's ends: that end follows the pointer, the other stays.
    const end = s.tool === "timing" ? tools.timingEndAt(p.x) : null;
    if (end !== null && s.timing) drag.fixed = s.timing[1 - end];
    s.drag = drag;
    canvas.focus();
  });
  canvas.addEventListener("mousemove", (e) => {
    if (s.drag) return;
    const grab = s.tool === "timing" && tools.timingEndAt(local(e).x) !== null;
    canvas.style.cursor = grab ? "ew-resize" : "";
  });
  window.addEventListener("mousemove", (e) => {
    const drag = s.drag;
    if (!drag) return;
    const p = local(e);
    drag.x1 = p.x; drag.y1 = p.y;
    if (Math.abs(p.x - drag.x) + Math.abs(p.y - drag.y) > 3) drag.moved = true;
    if (!drag.moved) return;
    if (s.tool === "zoom" && drag.zoom === null) {
      drag.zoom = Math.abs(p.y - drag.y) > Math.abs(p.x - drag.x) ? "scale" : "range";
    }
    if (s.tool === "pan") {
      const dt = ((p.x - drag.x) / painter.width()) * (drag.t1 - drag.t0);
      s.view = { t0: drag.t0 - dt, t1: drag.t1 - dt };
      scroller.scrollTop = drag.scroll - (p.y - drag.y);
      tools.changed();
    } else if (s.tool === "timing") {
      const t = painter.tOf(p.x);
      tools.time(Math.min(drag.fixed, t), Math.max(drag.fixed, t));
    } else if (drag.zoom === "scale") {
      // From the view the drag began with, so the time under the pointer stays put.
      const at = drag.t0 + (drag.x / painter.width()) * (drag.t1 - drag.t0);
      tools.setView(zoomed({ t0: drag.t0, t1: drag.t1 }, dragZoomFactor(p.y - drag.y), at));
    } else {
      painter.draw();
    }
  });
  window.addEventListener("mouseup", (e) => {
    if (!s.drag || !canvas.isConnected) { s.drag = null; return; }
    const d = s.drag;
    s.drag = null;
    const p = local(e);
    if (s.tool === "select") {
      if (!d.moved) {
        const id = tools.hit(p.x, p.y);
        if (id !== null) void tools.selectEvent(id).catch(tools.showError);
      } else {
        void tools.selectRange(painter.tOf(Math.min(d.x, p.x)), painter.tOf(Math.max(d.x, p.x)),
                               d.y, p.y).catch(tools.showError);
      }
    } else if (s.tool === "timing") {
      if (!d.moved) tools.clearTiming();
    } else if (s.tool === "zoom" && d.zoom !== "scale") {
      if (d.moved && Math.abs(p.x - d.x) > 3) {
        const a = painter.tOf(Math.min(d.x, p.x)), b = painter.tOf(Math.max(d.x, p.x));
        tools.setView({ t0: a, t1: Math.max(b, a + 10) });
      } else {
        tools.zoom(e.shiftKey ? 2 : 0.5, painter.tOf(p.x));
      }
    }
    painter.draw();
  });
  scroller.addEventListener("wheel", (e) => {
    const r = canvas.getBoundingClientRect();
    const at = painter.tOf(e.clientX - r.left);
    if (e.ctrlKey || e.altKey || s.tool === "zoom") {
      e.preventDefault();
      tools.zoom(Math.pow(1.0015, e.deltaY), at);
    } else if (e.shiftKey) {
      e.preventDefault();
      tools.pan((e.deltaY || e.deltaX) / 1000);
    }
  }, { passive: false });
  scroller.addEventListener("scroll", () => painter.draw());
  const onKey = (e: KeyboardEvent) => {
    if (!canvas.isConnected) { window.removeEventListener("keydown", onKey); return; }
    const target = e.target as HTMLElement | null;
    if (target && (target.tagName === "INPUT" || target.tagName === "SELECT")) return;
    const mid = (s.view.t0 + s.view.t1) / 2;
    const k = e.key.toLowerCase();
    if (k === "w") tools.zoom(0.8, mid);
    else if (k === "s") tools.zoom(1.25, mid);
    else if (k === "a") tools.pan(-0.2);
    else if (k === "d") tools.pan(0.2);
    else if (k === "1") tools.setTool("select");
    else if (k === "2") tools.setTool("pan");
    else if (k === "3") tools.setTool("zoom");
    else if (k === "4") tools.setTool("timing");
    else return;
    e.preventDefault();
  };
  window.addEventListener("keydown", onKey);
  const resized = new ResizeObserver(() => {
    if (canvas.isConnected) painter.draw(); else resized.disconnect();
  });
  resized.observe(scroller);
}

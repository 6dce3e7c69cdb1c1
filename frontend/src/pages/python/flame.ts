// The flame graph: call paths as nested bars (a bar's width is its inclusive time), drawn as
// positioned DOM boxes (text only). Clicking a bar zooms to it (its ancestors stay, full
// width); search marks the bars whose function matches and says what share of the time they
// hold. The icicle is the same drawing of the inverted tree: each function's self time at the
// top, its callers below. Pure layout functions first, then the view.
import { duration, h } from "../../dom";

/** A call tree as the server sends it (parents before children). */
export interface Tree { names: string[]; parent: number[]; name: number[]; self_ns: number[];
  total_ns: number[]; count: number[]; }

export const ROW_PX = 18;
const MIN_PX = 0.5; // narrower bars are not drawn

/** Children of each node (and the roots, under key -1), the widest first. */
export function childrenOf(t: Tree): Map<number, number[]> {
  const kids = new Map<number, number[]>();
  for (let i = 0; i < t.parent.length; i++) {
    const p = t.parent[i];
    const list = kids.get(p);
    if (list) list.push(i); else kids.set(p, [i]);
  }
  for (const list of kids.values()) list.sort((a, b) => t.total_ns[b] - t.total_ns[a]);
  return kids;
}

/** The inverted tree: per function its self time at the root, then who called it. */
export function inverted(t: Tree): Tree {
  const out: Tree = { names: t.names, parent: [], name: [], self_ns: [], total_ns: [],
                      count: [] };
  const index = new Map<string, number>();
  const path: number[] = [];
  for (let i = 0; i < t.parent.length; i++) {
    const own = t.self_ns[i];
    if (own <= 0) continue;
    path.length = 0;
    for (let j = i; j >= 0; j = t.parent[j]) path.push(t.name[j]);
    let at = -1;
    for (const fn of path) {
      const key = `${at}/${fn}`;
      let node = index.get(key);
      if (node === undefined) {
        node = out.parent.length;
        index.set(key, node);
        out.parent.push(at); out.name.push(fn); out.self_ns.push(0); out.total_ns.push(0);
        out.count.push(0);
      }
      out.total_ns[node] += own;
      out.count[node] += t.count[i];
      at = node;
    }
    out.self_ns[at] += own;
  }
  return out;
}

export interface Box { node: number; x: number; w: number; depth: number; }

/** Bars of the subtree of ``focus`` (-1: everything) across ``width`` pixels; the focus's
 * ancestors are drawn full width above it. */
export function layout(t: Tree, kids: Map<number, number[]>, focus: number,
                       width: number): Box[] {
  const boxes: Box[] = [];
  const chain: number[] = [];
  for (let j = focus; j >= 0; j = t.parent[j]) chain.unshift(j);
  chain.forEach((node, depth) => boxes.push({ node, x: 0, w: width, depth }));
  const roots = focus >= 0 ? [focus] : kids.get(-1) ?? [];
  const whole = focus >= 0 ? t.total_ns[focus] : roots.reduce((s, r) => s + t.total_ns[r], 0);
  if (whole <= 0) return boxes;
  const scale = width / whole;
  const top = Math.max(chain.length - 1, 0);
  const walk = (node: number, x: number, depth: number): void => {
    const w = t.total_ns[node] * scale;
    if (w < MIN_PX) return;
    if (!(focus >= 0 && node === focus)) boxes.push({ node, x, w, depth });
    let cx = x;
    for (const k of kids.get(node) ?? []) {
      walk(k, cx, depth + 1);
      cx += t.total_ns[k] * scale;
    }
  };
  let x = 0;
  for (const r of roots) {
    walk(r, x, focus >= 0 ? top : 0);
    x += t.total_ns[r] * scale;
  }
  return boxes;
}

/** A stable colour per function: warm for Python code, cool for C functions. */
function colour(name: string): string {
  let hash = 0;
  for (let i = 0; i < name.length; i++) hash = (hash * 31 + name.charCodeAt(i)) | 0;
  const py = /:\d+ /.test(name);
  const hue = py ? 10 + (Math.abs(hash) % 45) : 190 + (Math.abs(hash) % 50);
  return `hsl(${hue} 75% ${py ? 68 : 72}%)`;
}

/** A frame's short label: the function, without the file. */
export function label(name: string): string {
  const m = /^\$(.*):(\d+) (.*)$/s.exec(name);
  return m ? m[3] : name.replace(/^\$/, "");
}

export class FlameGraph {
  readonly element = h("div", { className: "flame", id: "flame", role: "tree" });
  private tree: Tree;
  private kids: Map<number, number[]>;
  private focusNode = -1;
  private query = "";
  /** Shown when a bar is clicked; set by the page. */
  onSelect: (node: number) => void = () => undefined;

  constructor(tree: Tree, private readonly total: number) {
    this.tree = tree;
    this.kids = childrenOf(tree);
    new ResizeObserver(() => this.draw()).observe(this.element);
  }

  setTree(tree: Tree): void {
    this.tree = tree;
    this.kids = childrenOf(tree);
    this.focusNode = -1;
    this.draw();
  }

  get current(): Tree { return this.tree; }
  get focus(): number { return this.focusNode; }

  zoom(node: number): void {
    this.focusNode = node;
    this.draw();
  }

  /** Mark functions whose name holds ``q`` (case-insensitive); the share of the time they
   * hold (outermost matches only). */
  search(q: string): number {
    this.query = q.trim().toLowerCase();
    this.draw();
    if (!this.query) return 0;
    const t = this.tree;
    let held = 0;
    const walk = (node: number): void => {
      if (t.names[t.name[node]].toLowerCase().includes(this.query)) {
        held += t.total_ns[node];
        return;
      }
      for (const k of this.kids.get(node) ?? []) walk(k);
    };
    for (const r of this.kids.get(-1) ?? []) walk(r);
    return this.total > 0 ? held / this.total : 0;
  }

  draw(): void {
    const width = this.element.clientWidth || 800;
    const t = this.tree;
    const boxes = layout(t, this.kids, this.focusNode, width);
    const depth = boxes.reduce((d, b) => Math.max(d, b.depth), 0) + 1;
    this.element.style.height = `${depth * ROW_PX}px`;
    const nodes = boxes.map((b) => {
      const name = t.names[t.name[b.node]];
      const match = this.query !== "" && name.toLowerCase().includes(this.query);
      const el = h("div", {
        className: "flame-bar" + (match ? " match" : "") + (b.node === this.focusNode ? " focus" : ""),
        "data-node": b.node, "data-name": name, role: "treeitem", tabindex: 0,
        title: `${name}\n${duration(t.total_ns[b.node])} total, ` +
               `${duration(t.self_ns[b.node])} self, ${t.count[b.node]} calls/samples`,
        onclick: () => { this.onSelect(b.node); this.zoom(b.node); },
        onkeydown: (e: Event) => {
          if ((e as KeyboardEvent).key === "Enter") { this.onSelect(b.node); this.zoom(b.node); }
        },
      }, b.w > 30 ? label(name) : "");
      el.style.left = `${b.x}px`;
      el.style.width = `${Math.max(b.w - 1, 1)}px`;
      el.style.top = `${b.depth * ROW_PX}px`;
      el.style.background = match ? "" : colour(name);
      return el;
    });
    this.element.replaceChildren(...nodes);
  }
}

// DOM helpers. Profile data (op and event names) only ever reaches the page as text nodes,
// never as HTML, so a name like "<img src=x onerror=...>" shows as those characters.

type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | undefined | ((e: Event) => void)>;

/** Create an element with attributes (on* keys become listeners) and children. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K, attrs: Attrs = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === false) continue;
    if (typeof value === "function") {
      el.addEventListener(key.slice(2), value);
    } else if (key === "className") {
      el.className = String(value);
    } else {
      el.setAttribute(key, value === true ? "" : String(value));
    }
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** Escape text for the few places a library wants an HTML string (chart tooltips). */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** Milliseconds with three decimals, as every page shows them. */
export function ms(value: number | null | undefined): string {
  return value === null || value === undefined ? "–" : value.toFixed(3);
}

/** A percentage with one decimal. */
export function pct(value: number | null | undefined): string {
  return value === null || value === undefined ? "–" : `${value.toFixed(1)}%`;
}

/** An integer with thousands separators. */
export function int(value: number | null | undefined): string {
  return value === null || value === undefined ? "–" : Math.round(value).toLocaleString("en-US");
}

const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

/** Bytes in binary units, named so, as the terminal writes them (stepscope/views/units.py):
 * "512 B", "433 KiB", "1.21 MiB", "12.5 GiB"; a negative amount keeps its sign. The one
 * byte formatter of every page. */
export function bytes(value: number): string {
  let v = Math.abs(value);
  let i = 0;
  while (v >= 1024 && i < BYTE_UNITS.length - 1) { v /= 1024; i++; }
  const sign = value < 0 ? "-" : "";
  if (i === 0) return `${sign}${v.toFixed(0)} B`;
  return `${sign}${v.toFixed(v < 10 ? 2 : v < 100 ? 1 : 0)} ${BYTE_UNITS[i]}`;
}

/** A count or a counter's value as the terminal writes it: integers with thousands
 * separators, fractions with three significant figures (at least), never e-notation. */
export function count(value: number): string {
  if (Number.isInteger(value)) return value.toLocaleString("en-US");
  const a = Math.abs(value);
  const digits = a >= 100 ? 0 : a >= 10 ? 1 : a >= 0.01 ? 2 : 6;
  return value.toLocaleString("en-US", { minimumFractionDigits: digits,
                                         maximumFractionDigits: digits });
}

/** A duration in nanoseconds, in the unit that suits it. */
export function duration(ns: number): string {
  const a = Math.abs(ns);
  if (a >= 1e9) return `${(ns / 1e9).toFixed(3)} s`;
  if (a >= 1e6) return `${(ns / 1e6).toFixed(3)} ms`;
  if (a >= 1e3) return `${(ns / 1e3).toFixed(3)} µs`;
  return `${Math.round(ns)} ns`;
}

const SVG_NS = "http://www.w3.org/2000/svg";

/** Create an SVG element with attributes and children (strings become text nodes). */
export function svg(tag: string, attrs: Record<string, string | number>,
                    ...children: (Node | string)[]): SVGElement {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children) el.append(typeof c === "string" ? document.createTextNode(c) : c);
  return el;
}

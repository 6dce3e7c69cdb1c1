// A table sortable by any column and filterable by a text predicate, rendered as DOM rows
// (text only) up to a cap, so a profile with many thousands of ops stays responsive.
import { h } from "./dom";

export interface Column<R> {
  key: string;
  title: string;
  value: (row: R) => string | number;
  format?: (row: R) => string;
  numeric?: boolean;
  className?: string;
  clip?: boolean; // long text: show three lines (``format``'s text), the whole value on hover
}

/** A numeric, right-aligned column showing ``row[key]`` through ``format``. */
export function numberColumn<R>(key: keyof R & string, title: string,
                                format: (v: number) => string): Column<R> {
  return { key, title, numeric: true, value: (r) => r[key] as number,
           format: (r) => format(r[key] as number) };
}

export class SortableTable<R> {
  readonly element: HTMLElement;
  private sortKey: string | null = null;
  private descending = true;
  private filter: (row: R) => boolean = () => true;
  private readonly body = h("tbody");
  private readonly note = h("p", { className: "muted" });
  private readonly head: HTMLTableRowElement;

  constructor(private readonly columns: Column<R>[], private rows: R[],
              private readonly cap = 2000, id?: string) {
    this.head = h("tr");
    for (const col of columns) {
      const th = h("th", {
        className: "sortable" + (col.numeric ? " num" : ""), "data-key": col.key,
        title: `Sort by ${col.title}`, onclick: () => this.sortBy(col.key),
      }, col.title);
      this.head.append(th);
    }
    this.element = h("div", { className: "table-wrap" },
                     h("table", { id }, h("thead", {}, this.head), this.body),
                     this.note);
    this.render();
  }

  setRows(rows: R[]): void { this.rows = rows; this.render(); }

  setFilter(filter: (row: R) => boolean): void { this.filter = filter; this.render(); }

  /** Sort by a column; the same column again flips the order (numbers start largest). */
  sortBy(key: string): void {
    const col = this.columns.find((c) => c.key === key);
    if (!col) return;
    this.descending = this.sortKey === key ? !this.descending : !!col.numeric;
    this.sortKey = key;
    this.render();
  }

  private render(): void {
    let rows = this.rows.filter(this.filter);
    const col = this.columns.find((c) => c.key === this.sortKey);
    if (col) {
      const sign = this.descending ? -1 : 1;
      rows = [...rows].sort((a, b) => {
        const x = col.value(a), y = col.value(b);
        const c = typeof x === "number" && typeof y === "number" ? x - y
          : String(x).localeCompare(String(y));
        return sign * c;
      });
    }
    for (const th of Array.from(this.head.children)) {
      const key = (th as HTMLElement).dataset.key;
      if (key === this.sortKey) th.setAttribute("aria-sort", this.descending ? "descending" : "ascending");
      else th.removeAttribute("aria-sort");
    }
    const shown = rows.slice(0, this.cap);
    this.body.replaceChildren(...shown.map((row) => h("tr", {}, ...this.columns.map((c) => {
      const v = c.value(row);
      return h("td", {
        className: (c.numeric ? "num" : "") + (c.className ? " " + c.className : ""),
        "data-key": c.key, "data-value": typeof v === "number" ? String(v) : undefined,
      }, c.clip ? h("div", { className: "clip", title: String(v) },
                    c.format ? c.format(row) : String(v))
         : c.format ? c.format(row) : String(v));
    }))));
    this.note.textContent = rows.length > shown.length
      ? `Showing ${shown.length} of ${rows.length} rows; filter to narrow them.`
      : `${rows.length} of ${this.rows.length} rows`;
  }
}

// Long C++ (kernel) names made readable, as the terminal's tables shorten them
// (stepscope/views/tables.py short_name): the full name stays on hover and in the JSON.

/** The index just past the group opening at ``name[at]`` (-1 when it never closes). */
function skipGroup(name: string, at: number, open: string, close: string): number {
  let depth = 0;
  for (let i = at; i < name.length; i++) {
    if (name[i] === open) depth++;
    else if (name[i] === close && --depth === 0) return i + 1;
  }
  return -1;
}

/** ``name`` without its return type, with template arguments as ``<…>`` and without its
 * argument list; past ``limit`` characters, its middle left out. */
export function shortName(name: string, limit = 60): string {
  const text = name.startsWith("void ") ? name.slice(5) : name;
  let out = "";
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (c === "<" && !text.slice(0, i).endsWith("operator")) {
      const end = skipGroup(text, i, "<", ">");
      if (end < 0) { out = text; break; }
      out += "<…>";
      i = end;
    } else if (c === "(" && i > 0 && !text.startsWith("(anonymous namespace)", i)) {
      const end = skipGroup(text, i, "(", ")");
      if (end < 0) { out = text; break; }
      i = end;
    } else {
      out += c;
      i++;
    }
  }
  const short = out.trim() || name;
  if (short.length <= limit) return short;
  const head = Math.floor(limit / 3);
  return short.slice(0, head) + "…" + short.slice(short.length - (limit - head - 1));
}

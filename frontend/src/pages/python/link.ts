// Requests carried from one page to another on the same run: the Python profile asks the
// trace viewer to search for a function; the trace viewer asks the Python profile for a
// selected time range. Each is taken once by the page it is for.

/** What the trace viewer should search for when it opens next. */
let traceSearch: string | null = null;
/** The absolute time range (ns) the Python profile should show when it opens next. */
let pythonRange: { start_ns: number; end_ns: number } | null = null;

export function requestTraceSearch(q: string): void { traceSearch = q; }

export function takeTraceSearch(): string | null {
  const q = traceSearch;
  traceSearch = null;
  return q;
}

export function requestPythonRange(start_ns: number, end_ns: number): void {
  pythonRange = { start_ns, end_ns };
}

export function takePythonRange(): { start_ns: number; end_ns: number } | null {
  const r = pythonRange;
  pythonRange = null;
  return r;
}

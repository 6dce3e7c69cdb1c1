// The JSON API, by relative URLs so the UI works wherever it is mounted (stepscope serve
// at "/", TensorBoard at "/data/plugin/stepscope/").

/** A run of the logdir; ``trigger`` is set for a flight recorder's dump (what saved it). */
export interface Run { name: string; hosts: string[]; trigger?: string | null; }
export interface ToolInfo { name: string; title: string; csv: boolean; flags: string[];
  runs?: string[]; }
export interface Progress { status: string; done_bytes: number; total_bytes: number; file: string;
  error?: string;
  /** While the trace viewer's index is built (status "indexing"): its events, share done. */
  events?: number; share?: number; }

export class ApiError extends Error {
  constructor(public status: number, message: string) { super(message); }
}

/** URL of an API route with query parameters (empty values left out). */
export function apiUrl(route: string, params: Record<string, string | undefined> = {}): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== "") q.set(k, v);
  const s = q.toString();
  return `api/${route}${s ? "?" + s : ""}`;
}

async function fetchJson(url: string): Promise<{ status: number; body: any }> {
  const response = await fetch(url, { headers: { Accept: "application/json" } });
  let body: any;
  try { body = await response.json(); } catch { body = { error: response.statusText }; }
  if (!response.ok) throw new ApiError(response.status, body?.error ?? response.statusText);
  return { status: response.status, body };
}

export async function getJson<T>(route: string, params: Record<string, string | undefined> = {})
    : Promise<T> {
  return (await fetchJson(apiUrl(route, params))).body as T;
}

/**
 * A tool's data; while the server is still loading the run (202) it reports progress through
 * onProgress and asks again.
 */
export async function toolData<T>(params: Record<string, string | undefined>,
                                  onProgress: (p: Progress) => void): Promise<T> {
  for (;;) {
    const { status, body } = await fetchJson(apiUrl("data", params));
    if (status !== 202) return body as T;
    onProgress(body as Progress);
    await new Promise((r) => setTimeout(r, 250));
  }
}

// The Diff tool's JSON (web/diff_tool.py, analysis/run_diff.py) and the formatting of its
// figures.
import { getJson, Run, toolData, Progress } from "../../api";

export interface Dist { count: number; median_ms: number | null; mean_ms: number | null;
  p10_ms: number | null; p90_ms: number | null; min_ms: number | null; max_ms: number | null; }
export interface StepShift { base: Dist; new: Dist; delta_ms: number | null;
  percent: number | null; ci_ms: [number, number] | null; ci_percent: [number, number] | null;
  verdict: string; }
export interface Change { kind: string; name: string; detail: string; base: number | null;
  new: number | null; delta: number; percent: number | null; status: string;
  beyond_noise: boolean | null; share_percent: number | null; note: string;
  side: string; }
export interface HostChange extends StepShift { host: string; }
export interface Diff {
  run: string; base: string; step_time: StepShift; breakdown_ms_per_step: Change[];
  ops: Change[]; kernels: Change[]; memory: Change[]; programs: Change[]; hosts: HostChange[];
  straggler: { base: string | null; new: string | null };
  input_verdict: { base: string; new: string };
  environment: Record<string, [unknown, unknown]>; notes: string[];
  step_ms: { base: number[]; new: number[] };
}

export function fetchDiff(run: string, base: string, progress: (p: Progress) => void)
    : Promise<Diff> {
  return toolData<Diff>({ run, tool: "diff", base }, progress);
}

/** The logdir's runs other than ``run``, newest first. */
export async function otherRuns(run: string): Promise<string[]> {
  const answer = await getJson<{ runs: Run[] }>("runs");
  return answer.runs.map((r) => r.name).filter((n) => n !== run);
}

const KEY = "stepscope.diff.base";

/** The baseline chosen last (this browser tab) if it is still one of ``runs``, else "". */
export function keptBase(runs: string[]): string {
  const kept = sessionStorage.getItem(KEY) ?? "";
  return runs.includes(kept) ? kept : "";
}

/** The baseline for the Diff page: the one chosen last, else the newest other run. */
export function rememberedBase(runs: string[]): string {
  return keptBase(runs) || (runs[0] ?? "");
}

export function rememberBase(base: string): void { sessionStorage.setItem(KEY, base); }

export function forgetBase(): void { sessionStorage.removeItem(KEY); }

export const signed = (v: number | null, digits = 3) =>
  v === null ? "–" : (v > 0 ? "+" : "") + v.toFixed(digits);
export const signedPct = (v: number | null) => (v === null ? "" : signed(v, 1) + "%");

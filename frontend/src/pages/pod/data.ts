// Pod viewer data: the pod_viewer tool's JSON (one fetch: every host's figures for every
// step), its categories with their colours, and the figures derived from it.
import { toolData } from "../../api";
import type { PageContext } from "../registry";

/** One host's (or device's) figures for one step, or summed over steps. */
export interface Figures {
  total_ms: number; compute_ms: number; input_ms: number; collectives_ms: number;
  copy_ms: number; other_ms: number; wait_ms: number;
  steps?: number; // in totals: the steps summed
}
export interface PodStep {
  step_num: number;
  per_host: Record<string, Figures>; // hosts that ran the step
  straggler: string | null; // null: fewer than two hosts ran it
  straggler_lead_ms: number;
}
export interface Alignment { shift_ns: number; method: string; reason: string; }
export interface Pod {
  run: string; path: string;
  hosts: string[]; // the columns: hosts, or "host/device" names
  kind: "hosts" | "devices";
  categories: string[];
  steps: PodStep[];
  totals: Record<string, Figures>;
  stragglers: Record<string, number>;
  summary: string;
  alignment: Record<string, Alignment>;
  failed_hosts: Record<string, string>;
  /** Model FLOPs utilisation per host (and over the run), or why it is unknown. */
  mfu?: { mfu: number | null; unknown: string; hosts: Record<string, HostMfu> };
}
export interface HostMfu {
  device: string; devices: number; peak_tflops: number | null; peak_source: string;
  model_tflop: number; step_ms: number; mfu: number | null; unknown: string;
}

export type CategoryKey = "compute_ms" | "input_ms" | "collectives_ms" | "copy_ms" | "other_ms";

/** The parts of a column, bottom to top; colours as the overview page's. */
export const CATEGORIES: { key: CategoryKey; label: string; color: string }[] = [
  { key: "compute_ms", label: "Compute", color: "#188038" },
  { key: "input_ms", label: "Input", color: "#d93025" },
  { key: "collectives_ms", label: "Collectives", color: "#e52592" },
  { key: "copy_ms", label: "Copy", color: "#12b5cb" },
  { key: "other_ms", label: "Other", color: "#9aa0a6" },
];

/** The pod viewer of the run (every host's; a host choice does not apply). */
export function fetchPod(ctx: PageContext): Promise<Pod> {
  return toolData<Pod>({ run: ctx.run, tool: "pod_viewer" }, ctx.progress);
}

/** "host" or "device": what a column is. */
export function noun(pod: Pod): string {
  return pod.kind === "devices" ? "device" : "host";
}

/** The host most often the straggler (the first of equals), or null when none was. */
export function topStraggler(pod: Pod): string | null {
  let best: string | null = null;
  for (const host of pod.hosts) {
    const n = pod.stragglers[host] ?? 0;
    if (n > 0 && (best === null || n > (pod.stragglers[best] ?? 0))) best = host;
  }
  return best;
}

/** Steps that had a straggler (two or more hosts ran them). */
export function judgedSteps(pod: Pod): number {
  return pod.steps.filter((s) => s.straggler !== null).length;
}

/** A host's totals divided by its steps: its average step. */
export function perStep(totals: Figures): Figures {
  const n = Math.max(totals.steps ?? 1, 1);
  return { total_ms: totals.total_ms / n, compute_ms: totals.compute_ms / n,
           input_ms: totals.input_ms / n, collectives_ms: totals.collectives_ms / n,
           copy_ms: totals.copy_ms / n, other_ms: totals.other_ms / n,
           wait_ms: totals.wait_ms / n, steps: totals.steps };
}

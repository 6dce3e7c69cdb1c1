// The XLA tools' data as the server sends it (analysis/op_profile, hlo_op_stats, roofline).

export interface Device { name: string; peak_tflops: number | null;
  peak_gbytes_per_s: number | null; peak_source: string;
  peak_bandwidth_source: string; count: number; }

export interface FusedOp { name: string; opcode: string; expression: string; flops: number; }

export interface OpRow {
  name: string; module: string; program_id: string; category: string; occurrences: number;
  total_ms: number; avg_ms: number; self_ms: number; time_percent: number;
  flops: number | null; bytes_accessed: number | null; gflops_per_s: number | null;
  gbytes_per_s: number | null; operational_intensity: number | null;
  flops_utilization: number | null; bandwidth_utilization: number | null; bound_by: string;
  flops_estimated: boolean; expression: string; shape: string; tf_op: string; source: string;
  padding_percent: number | null; fused?: FusedOp[];
}

export interface Group { name: string; time_ms: number; time_percent: number;
  flops_utilization: number | null; bandwidth_utilization: number | null; occurrences: number;
  flops_estimated: boolean; ops?: string[]; program_id?: string; categories?: Group[]; }

export interface OpProfileData { run: string; device: Device; modules: string[];
  total_ms: number; idle_ms: number; idle_percent: number; flops_utilization: number | null;
  bandwidth_utilization: number | null; categories: Group[]; programs: Group[]; ops: OpRow[];
  notes: string[]; }

export interface HloStatsData { run: string; device: Device; total_ms: number; idle_ms: number;
  ops: OpRow[]; notes: string[]; }

export interface RoofPoint { name: string; module: string; category: string; step: number | null;
  occurrences: number; self_ms: number; operational_intensity: number; gflops_per_s: number;
  gbytes_per_s: number; bound_by: string; flops_estimated: boolean; }

export interface RooflineData { run: string; device: Device; peak_gflops_per_s: number | null;
  peak_gbytes_per_s: number | null; ridge_point: number | null; points: RoofPoint[];
  steps: number[]; unplaced: number; notes: string[]; }

/** A utilisation (0..1, or more where a peak is understated) as a percentage, "–" if unknown. */
export function util(v: number | null | undefined): string {
  return v === null || v === undefined ? "–" : `${(100 * v).toFixed(1)}%`;
}

/** A figure with a few significant digits, "–" if unknown. */
export function fig(v: number | null | undefined, digits = 4): string {
  if (v === null || v === undefined) return "–";
  return Math.abs(v) >= 1e4 ? Math.round(v).toLocaleString("en-US") : String(+v.toPrecision(digits));
}

/** The colour of a utilisation: red (low) to green (high), grey when unknown. */
export function utilColor(v: number | null | undefined): string {
  if (v === null || v === undefined) return "#bdc1c6";
  const t = Math.max(0, Math.min(1, v));
  const hue = Math.round(t * 120); // 0 red → 120 green
  return `hsl(${hue}, 65%, 45%)`;
}

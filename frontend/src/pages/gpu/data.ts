// The GPU timeline tool's JSON (docs/gpu-timeline.md lists every key).
import { toolData, Progress } from "../../api";

export interface Breakdown {
  span_us: number; compute_us: number; communication_us: number; memory_us: number;
  idle_us: number; compute_percent: number; communication_percent: number;
  memory_percent: number; idle_percent: number; comm_total_us: number;
  comm_overlap_us: number; exposed_comm_us: number; overlap_percent: number | null;
}
export interface StepBreakdown extends Breakdown { step: number; }
export interface StreamIdle {
  stream: string; ops: number; idle_us: number; host_wait_us: number; kernel_wait_us: number;
  other_us: number; host_wait_percent: number; kernel_wait_percent: number;
  other_percent: number;
}
export interface Distribution {
  count: number; total_us: number; mean_us: number; p50_us: number; p90_us: number;
  p99_us: number; max_us: number; histogram: number[];
}
export interface Outlier {
  kernel: string; op: string; launch: string; step: number | null; cpu_duration_us: number;
  launch_delay_us: number; gpu_duration_us: number; why: string;
}
export interface Launches {
  launches: number; cpu_duration: Distribution; launch_delay: Distribution;
  gpu_duration: Distribution; kernels: number; short_kernels: number;
  short_kernels_us: number; short_kernels_percent: number; cpu_duration_outliers: number;
  launch_delay_outliers: number; outliers: Outlier[];
  by_call: { call: string; count: number; cpu_duration_us: number; launch_delay_us: number;
             gpu_duration_us: number }[];
}
export interface Queue {
  stream: string; max_length: number; mean_length: number; blocked_on_full_queue_us: number;
  series_us: number[]; series: number[];
}
export interface Sequence { kernels: string[]; length: number; count: number; total_us: number;
  mean_us: number; }
export interface Device {
  host: string; device: string; rank: number | null; ops: number; breakdown: Breakdown;
  steps: StepBreakdown[]; idle: { total: StreamIdle; streams: StreamIdle[] };
  launches: Launches; queues: Queue[]; sequences: Sequence[];
}
export interface Segment {
  host: string; kind: string; name: string; start_us: number; duration_us: number;
  percent: number;
}
export interface PathOf {
  host: string; step: number; step_us: number; length_us: number;
  by_host: Record<string, number>; by_kind: Record<string, number>; segments: Segment[];
  segments_left_out: number;
}
export interface PathStep {
  step: number; by_host: Record<string, number>; bounded_by: string | null; paths: PathOf[];
}
export interface Advice { rule: string; text: string; evidence: Record<string, unknown>;
  tool: string; }
export interface GpuTimeline {
  run: string; host: string | null; source: string; options: Record<string, number | boolean>;
  devices: Device[]; advice: Advice[];
  critical_path: { steps: PathStep[]; steps_left_out: number; origin_ns: Record<string, number> };
}

export const HISTOGRAM_EDGES_US = [0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 10000];

export const KIND_COLORS: Record<string, string> = {
  compute: "#3b7dd8", communication: "#e0803a", memcpy: "#8e6bbf", memset: "#b39ddb",
  memory: "#8e6bbf", idle: "#c9ced6", launch: "#2e9e6a", launch_delay: "#9ad0b4",
  host: "#d4a82a", sync: "#c0504d",
};

export function fetchGpu(run: string, host: string, onProgress: (p: Progress) => void)
    : Promise<GpuTimeline> {
  return toolData<GpuTimeline>({ run, host, tool: "gpu_timeline" }, onProgress);
}

/** "host GPU:0" (the host left out where the run has one). */
export function deviceLabel(d: Device, hosts: number): string {
  return hosts > 1 ? `${d.host} ${d.device}` : d.device;
}

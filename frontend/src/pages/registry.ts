// One entry per tool page: the server's tool name → the function that builds the page.
import type { Progress, ToolInfo } from "../api";
import { renderDiff } from "./diff/index";
import { renderGpu } from "./gpu/index";
import { renderInput } from "./input";
import { renderKernels } from "./kernels";
import { renderMemory } from "./memory/index";
import { renderOps } from "./ops";
import { renderOverview } from "./overview";
import { renderPod } from "./pod/index";
import { renderPython } from "./python/index";
import { renderTrace } from "./trace/index";
import { renderGraphViewer } from "./hlo/graph_viewer";
import { renderMemoryViewer } from "./hlo/memory_viewer";
import { renderHloStats } from "./xla/hlo_stats";
import { renderOpProfile } from "./xla/op_profile";
import { renderRoofline } from "./xla/roofline";

export interface PageContext {
  run: string;
  host: string; // "" for all hosts
  tool: string;
  tools: ToolInfo[];
  stale: () => boolean; // the user has moved on: drop the result
  progress: (p: Progress) => void; // the server is still loading the run
  go: (tool: string) => void; // open another tool on the same run and host
}

export type Page = (ctx: PageContext) => Promise<HTMLElement>;

export const PAGES: Record<string, Page> = {
  overview_page: renderOverview,
  framework_op_stats: renderOps,
  kernel_stats: renderKernels,
  input_pipeline_analyzer: renderInput,
  trace_viewer: renderTrace,
  pod_viewer: renderPod,
  gpu_timeline: renderGpu,
  memory_profile: renderMemory,
  python_profile: renderPython,
  op_profile: renderOpProfile,
  hlo_op_stats: renderHloStats,
  roofline_model: renderRoofline,
  memory_viewer: renderMemoryViewer,
  graph_viewer: renderGraphViewer,
  diff: renderDiff,
};

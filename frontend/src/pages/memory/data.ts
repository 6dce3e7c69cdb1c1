// The memory_profile tool's JSON, and fetching it for one allocator and time window.
import { toolData, Progress } from "../../api";

export interface BreakdownRow {
  op: string; size_bytes: number; requested_bytes: number; occurrences: number;
  region_type: string; data_type: string; shape: string;
}
export interface Allocator {
  name: string; host: string; source: string; capacity_bytes: number | null;
  peak_bytes_in_use: number; peak_heap_bytes: number; peak_time_ms: number;
  peak_step: number | null; num_allocations: number; num_deallocations: number;
  stack_bytes_at_peak: number | null; peak_reserved_bytes: number | null;
  fragmentation_at_peak: number | null; allocator_peak_bytes: number | null;
  breakdown_at_peak: BreakdownRow[]; breakdown_rows_total: number;
}
export interface OpMemory {
  name: string; allocator: string; host: string; allocated_bytes: number;
  self_allocated_bytes: number;
}
export interface Timeline {
  allocator: string; events: number; points: number; time_ms: number[];
  heap_bytes: number[]; stack_bytes: number[]; reserved_bytes: (number | null)[];
  free_bytes: (number | null)[]; fragmentation: (number | null)[]; activity: string[];
  op: string[]; requested_bytes: number[]; size_bytes: number[]; region_type: string[];
  data_type: string[]; shape: string[]; step: (number | null)[];
  steps: { step: number; start_ms: number; end_ms: number }[];
}
export interface MemoryProfile {
  run: string; host: string | null; allocators: Allocator[]; ops: OpMemory[];
  problems: Record<string, Record<string, number>>; allocator: number; timeline: Timeline;
}

/** The tool's data with allocator ``index``'s timeline at ``width`` points, in a window. */
export function fetchMemory(run: string, host: string, index: number, width: number,
                            window: [number, number] | null,
                            progress: (p: Progress) => void): Promise<MemoryProfile> {
  return toolData<MemoryProfile>({
    run, host, tool: "memory_profile", allocator: String(index),
    width: String(Math.max(2, Math.min(10000, Math.round(width)))),
    from_us: window ? String(Math.max(0, Math.floor(window[0] * 1000))) : undefined,
    to_us: window ? String(Math.max(0, Math.ceil(window[1] * 1000))) : undefined,
  }, progress);
}

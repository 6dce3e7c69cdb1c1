// The memory viewer's and graph viewer's data as the server sends them
// (analysis/memory_viewer.py, analysis/hlo_graph.py).

export interface ProgramInfo { program_id: string; name: string; label: string; hlo: boolean;
  buffer_assignment: boolean; error: string | null; }

export interface PeakBuffer { name: string; op: string; shape: string; size_bytes: number;
  unpadded_bytes: number; padding_bytes: number; allocation_type: string; source_op: string;
  source: string; logical_buffer_id: number; }

export interface MemoryViewerData { run: string; module: string; module_label: string;
  program_id: string; memory_space: number; memory_spaces: number[]; peak_heap_bytes: number;
  peak_unpadded_heap_bytes: number; padding_overhead_bytes: number; argument_bytes: number;
  output_bytes: number; temporary_bytes: number; reserved_bytes: number; indefinite_bytes: number;
  heap_bytes: number[]; unpadded_heap_bytes: number[]; instructions: string[];
  peak_index: number; peak_buffers: PeakBuffer[]; small_buffers_bytes: number;
  small_buffers_count: number; small_buffer_limit: number; programs: ProgramInfo[];
  notes: string[]; }

export interface GraphNode { name: string; opcode: string; shape: string; computation: string;
  distance: number; layer: number; order: number; time_ms: number | null; occurrences: number;
  fusion_kind: string; fused_ops: number; group: string; op_name: string; is_root: boolean; }

export interface GraphData { run: string; module: string; module_label: string;
  program_id: string; op: string; depth: number; expand_fusions: boolean; nodes: GraphNode[];
  edges: { source: string; target: string }[]; truncated: boolean; notes: string[];
  programs: ProgramInfo[]; ops: string[]; }

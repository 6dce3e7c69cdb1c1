// The memory and graph viewers' styles, scoped to their pages.
import { h } from "../../dom";

const CSS = `
.hlo-page .controls { display: flex; gap: 1rem; align-items: center; flex-wrap: wrap; margin-bottom: .6rem; }
.hlo-page .note { background: #e8f0fe; border-radius: 4px; padding: .5rem .8rem; margin: .3rem 0; }
.hlo-page dl.kv dd { font-variant-numeric: tabular-nums; margin: 0; }
.hlo-page .chart-wrap { position: relative; overflow-x: auto; }
.hlo-page .hover-card { position: absolute; z-index: 5; background: #fff; border: 1px solid var(--line);
  border-radius: 6px; box-shadow: 0 2px 10px rgba(0,0,0,.18); padding: .4rem .7rem; font-size: .8rem;
  pointer-events: none; max-width: 28rem; overflow-wrap: anywhere; }
.hlo-page .hover-card[hidden] { display: none; }
.hlo-page .hover-card h3 { margin: 0 0 .3rem; font-size: .9rem; }
.hlo-page .mv-bar, .hlo-page .gv-node { cursor: pointer; outline: none; }
.hlo-page .mv-bar:hover rect, .hlo-page .mv-bar:focus rect { stroke: #202124; stroke-width: 1.5; }
.hlo-page .gv-node:hover rect, .hlo-page .gv-node:focus rect { stroke: #202124; stroke-width: 2; }
.hlo-page .bars-wrap { overflow: visible; min-height: 12rem; }
.hlo-page input[list] { width: 22rem; }
`;

export function hloStyle(): HTMLStyleElement {
  return h("style", {}, CSS);
}

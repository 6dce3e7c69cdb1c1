// The XLA pages' styles, scoped to their pages (the shared sheet has none for them).
import { h } from "../../dom";

const CSS = `
.xla-page .xla-summary dd { font-variant-numeric: tabular-nums; }
.xla-page .note { background: #e8f0fe; border-radius: 4px; padding: .5rem .8rem; margin: .3rem 0; }
.xla-page .controls { display: flex; gap: 1rem; align-items: center; flex-wrap: wrap; margin-bottom: .6rem; }
.xla-page .op-tree { width: 100%; border-collapse: collapse; font-size: .85rem; }
.xla-page .op-tree td { padding: .2rem .4rem; border-bottom: 1px solid #f1f3f4; }
.xla-page .op-tree td.num { text-align: right; font-variant-numeric: tabular-nums; }
.xla-page .op-tree tr.node { cursor: pointer; }
.xla-page .op-tree tr.node:hover, .xla-page .op-tree tr.node:focus { background: #f1f3f4; outline: none; }
.xla-page .op-tree tr.selected { background: #e8f0fe; }
.xla-page .op-tree .twisty { display: inline-block; width: 1.1em; color: var(--muted); }
.xla-page .bar { display: inline-block; height: .7em; border-radius: 2px; vertical-align: middle; margin-right: .4rem; }
.xla-page .name-cell { overflow-wrap: anywhere; }
.xla-page #op-details pre { white-space: pre-wrap; overflow-wrap: anywhere; font-size: .8rem;
  background: #f8f9fa; padding: .4rem; border-radius: 4px; max-height: 14rem; overflow: auto; }
.xla-page .legend-bar { display: inline-block; width: 10rem; height: .7rem; vertical-align: middle;
  background: linear-gradient(to right, hsl(0,65%,45%), hsl(60,65%,45%), hsl(120,65%,45%)); }
.xla-page .roof-wrap { position: relative; }
.xla-page .roof-card { position: absolute; z-index: 5; background: #fff; border: 1px solid var(--line);
  border-radius: 6px; box-shadow: 0 2px 10px rgba(0,0,0,.18); padding: .4rem .7rem; font-size: .8rem;
  pointer-events: none; max-width: 24rem; overflow-wrap: anywhere; }
.xla-page .roof-card[hidden] { display: none; }
.xla-page .roof-point { cursor: pointer; outline: none; }
.xla-page .roof-point:hover circle, .xla-page .roof-point:focus circle { stroke: #202124; stroke-width: 2; }
`;

export function xlaStyle(): HTMLStyleElement {
  return h("style", {}, CSS);
}

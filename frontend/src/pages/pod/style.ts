// The pod viewer's styles, scoped to its page (the shared sheet has none for it).
import { h } from "../../dom";

const CSS = `
#pod-page .pod-chart-wrap { position: relative; }
#pod-page .pod-chart-scroll { overflow-x: auto; }
#pod-page .pod-svg { display: block; font-family: system-ui, sans-serif; }
#pod-page .pod-col { outline: none; }
#pod-page .pod-col:hover .pod-hit, #pod-page .pod-col:focus .pod-hit { fill: rgba(26,115,232,.08); }
#pod-page .pod-card { position: absolute; z-index: 5; background: #fff; border: 1px solid var(--line);
  border-radius: 6px; box-shadow: 0 2px 10px rgba(0,0,0,.18); padding: .5rem .8rem; font-size: .8rem;
  pointer-events: none; min-width: 15rem; max-width: 22rem; }
#pod-page .pod-card[hidden] { display: none; }
#pod-page .pod-card h3 { font-size: .9rem; margin: 0 0 .35rem; overflow-wrap: anywhere; }
#pod-page .pod-card dd { text-align: right; font-variant-numeric: tabular-nums; }
#pod-page .pod-legend { display: flex; gap: 1.1rem; flex-wrap: wrap; font-size: .85rem; margin: .2rem 0 .6rem; }
#pod-page .pod-mark-swatch { background: #fff; border: 2px solid #e37400; box-sizing: border-box; }
#pod-page .pod-slider { display: flex; align-items: center; gap: .8rem; flex-wrap: wrap; }
#pod-page #pod-step-slider { width: min(34rem, 60vw); }
#pod-page #pod-step-num { font-weight: 600; font-variant-numeric: tabular-nums; min-width: 5.5rem; }
#pod-page tr.pod-top td { font-weight: 600; background: #fef7e0; }
#pod-page .note { background: #e8f0fe; border-radius: 4px; padding: .5rem .8rem; }
#pod-page #pod-straggler { color: #b06000; }
`;

export function podStyle(): HTMLStyleElement {
  return h("style", {}, CSS);
}

// The Python profile's styles, scoped to its page.
import { h } from "../../dom";

const CSS = `
#python-page .flame { position: relative; width: 100%; overflow: hidden; min-height: 2rem;
  font: 11px/18px system-ui, sans-serif; }
#python-page .flame-bar { position: absolute; height: 17px; box-sizing: border-box; padding: 0 3px;
  white-space: nowrap; overflow: hidden; text-overflow: ellipsis; cursor: pointer;
  border-radius: 2px; color: #202124; }
#python-page .flame-bar:hover, #python-page .flame-bar:focus { outline: 1px solid #202124; }
#python-page .flame-bar.match { background: #c58af9; font-weight: 600; }
#python-page .flame-bar.focus { outline: 2px solid #1a73e8; }
#python-page .py-modes button[aria-checked="true"] { background: #e8f0fe; font-weight: 600; }
#python-page #py-controls label { margin-right: 1rem; }
`;

export function pythonStyle(): HTMLStyleElement {
  return h("style", {}, CSS);
}

// The pod viewer: which host (or device) holds the others back. The parts: data.ts (the
// tool's JSON and figures derived from it), chart.ts (stacked columns with a hover card),
// tables.ts (stragglers, clock alignment) and style.ts; this module lays the page out and
// keeps the chosen step.
import { apiUrl } from "../../api";
import { h, int, ms } from "../../dom";
import type { PageContext } from "../registry";
import { CardRow, Column, columnChart, legend } from "./chart";
import { CATEGORIES, fetchPod, Figures, judgedSteps, noun, perStep, Pod, PodStep, topStraggler }
  from "./data";
import { podStyle } from "./style";
import { alignmentTable, mfuTable, stragglerTable } from "./tables";

function figureRows(f: Figures): CardRow[] {
  return [
    { key: "total_ms", label: "Total", value: f.total_ms },
    ...CATEGORIES.map((c) => ({ key: c.key, label: c.label, value: f[c.key], color: c.color })),
    { key: "wait_ms", label: "Waited for the straggler", value: f.wait_ms },
  ];
}

function header(pod: Pod, top: string | null, ctx: PageContext): HTMLElement {
  const who = noun(pod);
  const tool = ctx.tools.find((t) => t.name === ctx.tool);
  const judged = judgedSteps(pod);
  return h("section", { className: "card wide", id: "pod-summary" },
    h("h2", {}, "Stragglers"),
    pod.hosts.length < 2
      ? h("p", { className: "note", id: "pod-single" },
          `The pod viewer compares hosts or devices side by side; this run has one ${who}`,
          pod.hosts.length ? ` (${pod.hosts[0]})` : "",
          ", so there is nothing to compare it with and no straggler. Its step times are ",
          "shown below.")
      : h("p", { id: "pod-summary-text" }, pod.summary),
    pod.hosts.length < 2 ? null
      : h("p", {}, "Most often the straggler: ",
          top ? h("strong", { id: "pod-straggler", "data-host": top }, top)
            : h("strong", { id: "pod-straggler" }, "none"),
          top ? ` (${int(pod.stragglers[top])} of ${int(judged)} steps)` : ""),
    pod.hosts.length >= 2 ? stragglerTable(pod, top) : null,
    tool?.csv
      ? h("p", {}, h("a", { id: "export-csv", download: "",
                            href: apiUrl("csv", { run: ctx.run, tool: ctx.tool }) },
                     `Export every step and ${who} as CSV`))
      : null);
}

function stepColumns(pod: Pod, step: PodStep, chosen: string): Column[] {
  return pod.hosts.map((name) => ({ name, figures: step.per_host[name] ?? null,
                                    straggler: step.straggler === name, chosen: name === chosen }));
}

/** The chosen step's chart, with a slider over the steps. */
function stepSection(pod: Pod, chosen: string): HTMLElement {
  const who = noun(pod);
  const section = h("section", { className: "card wide", id: "pod-step" },
    h("h2", {}, `One step, ${who} by ${who}`));
  const steps = pod.steps;
  if (!steps.length) {
    section.append(h("p", { className: "muted", id: "pod-no-steps" },
      "No steps were found in this run, so there is no step to show. Mark each step with ",
      h("code", {}, "stepscope.Trace('train', step_num=i, _r=1)"), "."));
    return section;
  }
  const biggest = Math.max(...steps.flatMap((s) => Object.values(s.per_host)
    .map((f) => f.total_ms)), 0);
  const slider = h("input", { type: "range", id: "pod-step-slider", min: 0,
                              max: steps.length - 1, step: 1, value: 0,
                              "aria-label": "Step", disabled: steps.length < 2 });
  const number = h("span", { id: "pod-step-num", "aria-live": "polite" });
  const place = h("span", { className: "muted", id: "pod-step-place" });
  const same = h("input", { type: "checkbox", id: "pod-same-scale" });
  const box = h("div", { id: "pod-step-box" });
  const show = () => {
    const i = Number(slider.value);
    const step = steps[i];
    number.textContent = `Step ${step.step_num}`;
    number.dataset.step = String(step.step_num);
    place.textContent = `${int(i + 1)} of ${int(steps.length)}`;
    slider.setAttribute("aria-valuetext", `Step ${step.step_num}`);
    const max = same.checked ? biggest
      : Math.max(...Object.values(step.per_host).map((f) => f.total_ms), 0);
    box.replaceChildren(columnChart({
      id: "pod-step-chart", columns: stepColumns(pod, step, chosen), max,
      label: `Step ${step.step_num}: time of each ${who}`,
      attrs: { "data-step": String(step.step_num) },
      card: (c) => ({
        title: `${c.name} — step ${step.step_num}`,
        rows: c.figures ? [...figureRows(c.figures), {
          key: "straggler_lead_ms", label: "Straggler lead",
          value: c.straggler ? step.straggler_lead_ms : null,
          text: c.straggler ? `${ms(step.straggler_lead_ms)} ms`
            : step.straggler ? `– (the straggler is ${step.straggler})` : "– (no straggler)",
        }] : [{ key: "total_ms", label: "Total", value: null,
                text: `– (this ${who} has no figures for this step)` }],
      }),
    }));
  };
  slider.addEventListener("input", show);
  same.addEventListener("change", show);
  show();
  section.append(
    h("div", { className: "pod-slider" }, h("label", { for: "pod-step-slider" }, "Step"), slider,
      number, place,
      h("label", {}, same, " Same scale for every step")),
    h("p", { className: "muted" }, `Each column is one ${who}'s time in the step. The `,
      `straggler is the ${who} with the most work (time less collectives); the others wait `,
      "for it in their collectives. Hover a column for its figures."),
    legend("pod-step-legend"), box);
  return section;
}

/** Every host's average step over all steps. */
function allSection(pod: Pod, top: string | null, chosen: string): HTMLElement {
  const who = noun(pod);
  const columns: Column[] = pod.hosts.map((name) => {
    const t = pod.totals[name];
    return { name, figures: t && t.steps ? perStep(t) : null, straggler: name === top,
             chosen: name === chosen };
  });
  const max = Math.max(...columns.map((c) => c.figures?.total_ms ?? 0), 0);
  return h("section", { className: "card wide", id: "pod-all" },
    h("h2", {}, `All steps: each ${who}'s average step`),
    legend("pod-all-legend"),
    columnChart({
      id: "pod-all-chart", columns, max, label: `Average step time of each ${who}`,
      card: (c) => {
        const t = pod.totals[c.name];
        const n = t?.steps ?? 0;
        return {
          title: `${c.name} — average of ${int(n)} step${n === 1 ? "" : "s"}`,
          rows: c.figures ? [...figureRows(c.figures),
            { key: "sum_ms", label: "Total over the steps", value: t.total_ms },
            { key: "straggler_steps", label: "Straggler in", value: null,
              text: `${int(pod.stragglers[c.name] ?? 0)} of ${int(judgedSteps(pod))} steps` }]
            : [{ key: "total_ms", label: "Total", value: null, text: "– (no steps)" }],
        };
      },
    }));
}

export async function renderPod(ctx: PageContext): Promise<HTMLElement> {
  const pod = await fetchPod(ctx);
  const top = topStraggler(pod);
  const chosen = pod.hosts.includes(ctx.host) ? ctx.host : "";
  return h("div", { id: "pod-page", "data-kind": pod.kind }, podStyle(),
    h("h1", {}, `Pod viewer — ${pod.run}`),
    ...Object.entries(pod.failed_hosts ?? {}).map(([host, why]) =>
      h("p", { className: "warning" }, `Host ${host} could not be read: ${why}`)),
    chosen ? h("p", { className: "muted" }, "The pod viewer shows every host; ", chosen,
               " is in bold.") : null,
    h("div", { className: "cards" }, header(pod, top, ctx), stepSection(pod, chosen),
      allSection(pod, top, chosen),
      h("section", { className: "card wide", id: "pod-mfu-card" },
        h("h2", {}, "Model FLOPs utilisation"),
        h("p", { className: "muted" }, pod.mfu?.unknown || "Model FLOPs per step over step time "
          + "and the devices' peak (give another peak: peak_tflops)."),
        mfuTable(pod)),
      h("section", { className: "card wide", id: "pod-alignment" },
        h("h2", {}, "Clock alignment"),
        h("p", { className: "muted" }, "How each host's clock was shifted to line up with the ",
          "first host's, where times are compared across hosts."),
        alignmentTable(pod))));
}

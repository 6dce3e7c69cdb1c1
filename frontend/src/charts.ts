// ECharts, bundled (only the parts we use); every chart is disposed when its page goes.
import * as echarts from "echarts/core";
import { BarChart, PieChart } from "echarts/charts";
import { GridComponent, LegendComponent, TitleComponent, TooltipComponent }
  from "echarts/components";
import { CanvasRenderer } from "echarts/renderers";
import { escapeHtml, h } from "./dom";

echarts.use([BarChart, PieChart, GridComponent, LegendComponent, TitleComponent,
             TooltipComponent, CanvasRenderer]);

const live: echarts.ECharts[] = [];
window.addEventListener("resize", () => live.forEach((c) => c.resize()));

/** Dispose every chart (before a page is replaced). */
export function disposeCharts(): void {
  while (live.length) live.pop()!.dispose();
}

function mount(className: string, id: string | undefined, option: echarts.EChartsCoreOption)
    : HTMLElement {
  const el = h("div", { className, id });
  // ECharts needs the element's size: draw once it is in the document.
  requestAnimationFrame(() => {
    const chart = echarts.init(el, undefined, { renderer: "canvas" });
    chart.setOption(option);
    live.push(chart);
  });
  return el;
}

export interface Series { name: string; color: string; values: number[]; }

/** A stacked column chart: one column per x value, one coloured part per series. */
export function stackedColumns(id: string, xs: (string | number)[], series: Series[],
                               unit: string): HTMLElement {
  return mount("chart", id, {
    animation: false,
    tooltip: {
      trigger: "axis", axisPointer: { type: "shadow" },
      formatter: (items: any[]) => {
        const lines = items.filter((it) => it.value > 0).map((it) =>
          `${it.marker}${escapeHtml(String(it.seriesName))}: ${Number(it.value).toFixed(3)} ${unit}`);
        const total = items.reduce((s, it) => s + Number(it.value), 0);
        return [`step ${escapeHtml(String(items[0]?.axisValue ?? ""))}: ${total.toFixed(3)} ${unit}`,
                ...lines].join("<br>");
      },
    },
    legend: { top: 0, type: "scroll" },
    grid: { left: 60, right: 20, top: 40, bottom: 40 },
    xAxis: { type: "category", data: xs.map(String), name: "step", nameLocation: "middle",
             nameGap: 26 },
    yAxis: { type: "value", name: unit },
    series: series.map((s) => ({ name: s.name, type: "bar", stack: "step", data: s.values,
                                 itemStyle: { color: s.color }, barMaxWidth: 40 })),
  });
}

/** A pie of the largest slices (the rest summed as "other"). */
export function pie(id: string, title: string, slices: { name: string; value: number }[],
                    keep = 10): HTMLElement {
  const sorted = [...slices].filter((s) => s.value > 0).sort((a, b) => b.value - a.value);
  const top = sorted.slice(0, keep);
  const rest = sorted.slice(keep).reduce((sum, s) => sum + s.value, 0);
  if (rest > 0) top.push({ name: "(other)", value: rest });
  const el = mount("pie", id, {
    animation: false,
    title: { text: title, left: "center", textStyle: { fontSize: 13 } },
    tooltip: {
      trigger: "item",
      formatter: (it: any) => `${escapeHtml(String(it.name))}: ${Number(it.value).toFixed(3)} ms` +
        ` (${Number(it.percent).toFixed(1)}%)`,
    },
    series: [{ type: "pie", radius: ["0%", "62%"], top: 24, data: top,
               label: { formatter: (p: any) => truncate(String(p.name), 28) } }],
  });
  // The slices' names, for tests and assistive tools (the canvas holds only pixels).
  el.dataset.slices = top.map((t) => t.name).join("\n");
  return el;
}

function truncate(text: string, n: number): string {
  return text.length > n ? text.slice(0, n - 1) + "…" : text;
}

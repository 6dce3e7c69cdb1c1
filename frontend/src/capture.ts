// The "Capture profile" dialog: capture running workers (stepscope's or TensorFlow's
// profiler server) into the served logdir, show each worker's progress, open the new run.
import { ApiError, apiUrl } from "./api";
import { h } from "./dom";

interface WorkerState { state: string; attempt: number; detail: string; }
interface Job { id: string; state: string; workers: Record<string, WorkerState>; run: string | null;
                error: string | null; }

async function post(body: unknown): Promise<Job> {
  const response = await fetch(apiUrl("capture"), {
    method: "POST", headers: { "Content-Type": "application/json", Accept: "application/json" },
    body: JSON.stringify(body),
  });
  const answer = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) throw new ApiError(response.status, answer.error ?? response.statusText);
  return answer as Job;
}

async function poll(id: string): Promise<Job> {
  const response = await fetch(apiUrl("capture", { id }));
  const answer = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) throw new ApiError(response.status, answer.error ?? response.statusText);
  return answer as Job;
}

function levelSelect(id: string, levels: [number, string][], chosen: number): HTMLSelectElement {
  const select = h("select", { id, name: id });
  for (const [value, label] of levels) select.append(h("option", { value: String(value) }, label));
  select.value = String(chosen);
  return select;
}

/** Build the dialog; ``opened(run)`` is called with the new run's name when a capture ends. */
export function captureDialog(opened: (run: string) => Promise<void>): HTMLDialogElement {
  const addr = h("input", { id: "capture-addr", type: "text", size: 48, required: true,
                            placeholder: "grpc://127.0.0.1:6009,grpc://127.0.0.1:6010" });
  // As TensorBoard's dialog: the field holds worker addresses, or a Cloud TPU name.
  const byAddress = h("input", { type: "radio", name: "capture-addr-type", value: "ip",
                                 id: "capture-type-ip", checked: true });
  const byTpu = h("input", { type: "radio", name: "capture-addr-type", value: "tpu",
                             id: "capture-type-tpu" });
  byTpu.addEventListener("change", () => { addr.placeholder = "my-tpu-name"; });
  byAddress.addEventListener("change", () => {
    addr.placeholder = "grpc://127.0.0.1:6009,grpc://127.0.0.1:6010";
  });
  const duration = h("input", { id: "capture-duration", type: "number", min: 1, max: 3600000,
                                value: 2000, required: true });
  const attempts = h("input", { id: "capture-attempts", type: "number", min: 1, max: 100,
                                value: 3, required: true });
  const host = levelSelect("capture-host-level", [[0, "0 (off)"], [1, "1 (critical)"],
    [2, "2 (info)"], [3, "3 (verbose)"]], 2);
  const python = levelSelect("capture-python-level", [[0, "0 (off)"], [1, "1 (on)"]], 0);
  const device = levelSelect("capture-device-level", [[0, "0 (off)"], [1, "1 (on)"]], 1);
  const status = h("div", { id: "capture-status", role: "status" });
  const go = h("button", { type: "submit", id: "capture-go" }, "Capture");
  const close = h("button", { type: "button", id: "capture-close" }, "Close");
  const row = (label: string, field: HTMLElement) => h("label", { className: "field" },
    h("span", {}, label), field);
  const form = h("form", { method: "dialog" },
    h("h2", {}, "Capture profile"),
    h("p", { className: "muted" }, "Workers that run stepscope.server.start(port) or ",
      "tf.profiler.experimental.server.start(port); separate several with commas. A host ",
      "without a port means port 6009; a TPU name captures the TPU's workers."),
    row("Profile service URL(s) or TPU name", addr),
    h("div", { className: "field", role: "radiogroup", "aria-label": "Address type" },
      h("label", {}, byAddress, " Host address(es)"), h("label", {}, byTpu, " TPU name")),
    row("Profiling duration (ms)", duration),
    row("Host trace level", host), row("Python trace level", python),
    row("Device trace level", device), row("Tracing attempts", attempts),
    status, h("div", { className: "buttons" }, go, close));
  const dialog = h("dialog", { id: "capture-dialog" }, form);
  close.addEventListener("click", () => dialog.close());

  const show = (job: Job) => {
    status.replaceChildren(...Object.entries(job.workers).map(([name, w]) =>
      h("div", { className: `worker worker-${w.state}`, "data-worker": name },
        `${name}: ${w.state}${w.attempt > 1 ? ` (attempt ${w.attempt})` : ""}`,
        w.detail ? ` — ${w.detail}` : "")));
    if (job.error) status.append(h("p", { className: "error" }, job.error));
  };

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    go.disabled = true;
    status.replaceChildren(h("p", { className: "muted" }, "Starting…"));
    try {
      let job = await post({
        service_addr: addr.value, is_tpu_name: byTpu.checked,
        duration_ms: Number(duration.value),
        num_tracing_attempts: Number(attempts.value), host_tracer_level: Number(host.value),
        python_tracer_level: Number(python.value), device_tracer_level: Number(device.value),
      });
      show(job);
      while (job.state === "running") {
        await new Promise((r) => setTimeout(r, 300));
        job = await poll(job.id);
        show(job);
      }
      if (job.state === "done" && job.run) {
        const failed = Object.values(job.workers).some((w) => w.state === "failed");
        if (!failed) dialog.close();
        await opened(job.run);
      }
    } catch (err) {
      status.replaceChildren(h("p", { className: "error", role: "alert" },
        err instanceof Error ? err.message : String(err)));
    } finally {
      go.disabled = false;
    }
  });
  return dialog;
}

/* The run explorer's script: draws each ablation of the page's JSON with Vega-Lite and wires the controls. */
(function () {
  "use strict";

  const DATA = JSON.parse(document.getElementById("explorer-data").textContent);
  const SETTINGS = DATA.settings;
  const MAX_WEIGHT = 0.999;
  const root = document.getElementById("explorer");
  const explorer = { weight: SETTINGS.ema_weight, sections: [], ready: null, errors: [] };
  window.explorer = explorer; // the tests read the page's data through it; handy in the console too

  // ---- numbers ---------------------------------------------------------------------------------------------

  /** TensorBoard's debiased EMA, as epoch_metrics.reward_ema computes it: last = w·last + (1−w)·y and n += 1
   * for a finite y, value last / (1 − wⁿ) (w = 1 is not debiased); a missing y is its own value and is not counted. */
  function ema(values, weight) {
    const out = new Array(values.length);
    let last = 0;
    let count = 0;
    for (let i = 0; i < values.length; i++) {
      const y = values[i];
      if (y === null || !Number.isFinite(y)) {
        out[i] = y;
        continue;
      }
      last = last * weight + (1 - weight) * y;
      count += 1;
      out[i] = weight === 1 ? last : last / (1 - Math.pow(weight, count));
    }
    return out;
  }
  explorer.ema = ema;

  const present = (v) => v !== null && v !== undefined && Number.isFinite(v);
  const num = (v, digits = 3) => (present(v) ? v.toFixed(digits) : "–");
  const signed = (v) => (present(v) ? (v > 0 ? "+" : "") + v.toFixed(3) : "–");
  const percent = (v) => (present(v) ? (100 * v).toFixed(1) + "%" : "–");
  const interval = (lo, hi) => (present(lo) && present(hi) ? `[${num(lo)}, ${num(hi)}]` : "–");
  const level = `${Math.round(100 * SETTINGS.ci_level)}%`;

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else if (key === "style") Object.assign(node.style, value);
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children.flat()) {
      if (child !== null && child !== undefined && child !== false) {
        node.append(child instanceof Node ? child : document.createTextNode(String(child)));
      }
    }
    return node;
  }

  // ---- rows the charts read --------------------------------------------------------------------------------

  /** One row per run × epoch, with each curve smoothed at weight (the side panels smooth like the reward). */
  function epochRows(ablation, weight) {
    const rows = [];
    for (const run of ablation.runs) {
      const s = ablation.series[run.run_id];
      if (!s) continue;
      const smoothed = ema(s.mean_reward, weight);
      const flat = ema(s.frac_zero_std_groups, weight);
      const sample = ema(s.sample_entropy, weight);
      const train = ema(s.train_entropy, weight);
      for (let i = 0; i < s.epoch.length; i++) {
        rows.push({
          run_id: run.run_id, label: run.label, epoch: s.epoch[i], reward: s.mean_reward[i], smoothed: smoothed[i],
          flat: s.frac_zero_std_groups[i], flat_smoothed: flat[i], sample_entropy: s.sample_entropy[i],
          sample_smoothed: sample[i], train_entropy: s.train_entropy[i], train_smoothed: train[i],
          snapshot_id: s.snapshot_id[i],
        });
      }
    }
    return rows;
  }

  function modelName(snapshotId) {
    return snapshotId === null || snapshotId === undefined ? "–" : SETTINGS.snapshot_model_prefix + snapshotId;
  }

  function horizonsOf(ablation) {
    return [...new Set(ablation.runs.map((r) => r.matched_horizon).filter(present))].sort((a, b) => a - b);
  }

  function anySeries(ablation, column) {
    return Object.values(ablation.series).some((s) => s[column].some(present));
  }

  // ---- Vega-Lite specs -------------------------------------------------------------------------------------

  const VISIBLE = { filter: "indexof(hidden, datum.run_id) < 0" };
  const HIDDEN_PARAM = { name: "hidden", value: [] };
  const CONFIG = {
    font: "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif",
    view: { stroke: null },
    axis: { labelColor: "#444", titleColor: "#333", gridColor: "#eceef1", domainColor: "#999", tickColor: "#999",
            labelFontSize: 11, titleFontSize: 11, titleFontWeight: "normal" },
    title: { anchor: "start", fontSize: 13, fontWeight: 600, subtitleColor: "#666", subtitleFontSize: 11, offset: 6 },
    header: { labelFontSize: 11, labelColor: "#333" },
    concat: { spacing: 18 },
  };

  function colourEncoding(ablation) {
    return {
      field: "run_id", type: "nominal", legend: null,
      scale: { domain: ablation.runs.map((r) => r.run_id), range: ablation.runs.map((r) => r.colour) },
    };
  }

  function epochExtent(ablation) {
    let lo = Infinity;
    let hi = -Infinity;
    for (const s of Object.values(ablation.series)) {
      if (s.epoch.length) {
        lo = Math.min(lo, s.epoch[0]);
        hi = Math.max(hi, s.epoch[s.epoch.length - 1]);
      }
    }
    return lo <= hi ? [lo, Math.max(hi, lo + 1)] : [0, 1];
  }

  /** Every layer of a panel gives its x the same scale: layers that leave it out would drop the zoom domain. */
  function horizonLayers(horizons, labelled, scale) {
    if (!horizons.length) return [];
    const data = { values: horizons.map((h) => ({ horizon: h })) };
    const layers = [{
      data, mark: { type: "rule", strokeDash: [5, 4], color: "#333", strokeWidth: 1.2, clip: true },
      encoding: { x: { field: "horizon", type: "quantitative", scale } },
    }];
    if (labelled) {
      layers.push({
        data, mark: { type: "text", align: "right", baseline: "top", dx: -5, dy: 4, y: 0, fontSize: 11, color: "#333",
                      clip: true },
        encoding: { x: { field: "horizon", type: "quantitative", scale },
                    text: { value: horizons.length === 1 ? `compute-matched horizon: epoch ${horizons[0]}`
                                                         : "compute-matched horizons" } },
      });
    }
    return layers;
  }

  function hoverLayers(y, color, scale) {
    const atHover = { filter: { param: "hover", empty: false } };
    const layers = [{ transform: [atHover], mark: { type: "rule", color: "#777", strokeWidth: 1, clip: true },
                      encoding: { x: { field: "epoch", type: "quantitative", scale } } }];
    if (y) {
      layers.push({
        transform: [VISIBLE, atHover, { filter: `isValid(datum.${y}) && isFinite(datum.${y})` }],
        mark: { type: "circle", size: 46, opacity: 1, stroke: "white", strokeWidth: 1.2, clip: true },
        encoding: { x: { field: "epoch", type: "quantitative", scale }, y: { field: y, type: "quantitative" }, color },
      });
    }
    return layers;
  }

  /** A panel's hover target: one invisible point per epoch, whose nearest-epoch strips set the hover param. It is
   * the panel's last layer, above every mark: a mark drawn under a still pointer (the hover rule itself) would take
   * the pointer from the strips and clear the hover. */
  function hoverStrips(panel, x) {
    return { name: `${panel}_strips`, transform: [{ aggregate: [], groupby: ["epoch"] }],
             mark: { type: "point", opacity: 0, size: 1 }, encoding: { x } };
  }

  function curvesSpec(ablation, width, rows) {
    const color = colourEncoding(ablation);
    const x = { field: "epoch", type: "quantitative", title: "epoch",
                scale: { domain: { param: "zoom", encoding: "x" }, nice: false, zero: false } };
    const xOwn = { field: "epoch", type: "quantitative", title: null, scale: { domain: epochExtent(ablation), nice: false } };
    const horizons = horizonsOf(ablation);
    const line = (field, extra, y) => ({
      transform: [VISIBLE], mark: { type: "line", strokeWidth: 1.8, clip: true, ...extra },
      encoding: { x, y: { field, type: "quantitative", ...y }, color },
    });
    const matched = ablation.runs.filter((r) => present(r.matched_reward) && present(r.matched_horizon))
      .map((r) => ({ run_id: r.run_id, label: r.label, horizon: r.matched_horizon, matched_reward: r.matched_reward,
                     low: r.matched_ci_low, high: r.matched_ci_high }));
    const reward = {
      name: "reward", width, height: 340,
      title: { text: "Reward per epoch",
               subtitle: "faint points: per-epoch mean reward · line: smoothed · diamonds: matched reward" },
      layer: [
        {
          params: [{ name: "zoom", select: { type: "interval", encodings: ["x"] }, bind: "scales" }],
          transform: [VISIBLE], mark: { type: "circle", size: 9, opacity: 0.25, clip: true },
          encoding: { x: xOwn, y: { field: "reward", type: "quantitative", title: "mean reward", scale: { zero: false } },
                      color },
        },
        { ...line("smoothed", { strokeWidth: 2.2 }), encoding: { ...line("smoothed").encoding, x: xOwn } },
        ...hoverLayers("smoothed", color, xOwn.scale),
        ...horizonLayers(horizons, true, xOwn.scale),
        {
          data: { values: matched }, transform: [VISIBLE],
          mark: { type: "point", shape: "diamond", filled: true, size: 110, opacity: 1, stroke: "#111", strokeWidth: 0.8,
                  clip: true },
          encoding: { x: { field: "horizon", type: "quantitative", scale: xOwn.scale },
                      y: { field: "matched_reward", type: "quantitative" },
                      color },
        },
        hoverStrips("reward", xOwn),
      ],
    };
    const panels = [reward];
    if (anySeries(ablation, "frac_zero_std_groups")) {
      panels.push({
        name: "flat", width, height: 130,
        title: { text: "Groups with no learning signal",
                 subtitle: "share of groups whose rewards are all equal (zero advantage), smoothed" },
        layer: [line("flat_smoothed", {}, { title: "flat groups", axis: { format: "%" } }),
                ...hoverLayers("flat_smoothed", color, x.scale), ...horizonLayers(horizons, false, x.scale),
                hoverStrips("flat", x)],
      });
    }
    if (anySeries(ablation, "sample_entropy") || anySeries(ablation, "train_entropy")) {
      panels.push({
        name: "entropy", width, height: 130,
        title: { text: "Entropy", subtitle: "solid: sample entropy · dashed: train entropy, smoothed" },
        layer: [line("sample_smoothed", {}, { title: "entropy", scale: { zero: false } }),
                line("train_smoothed", { strokeDash: [5, 3], strokeWidth: 1.4 }, { title: "entropy" }),
                ...hoverLayers(null, color, x.scale), ...horizonLayers(horizons, false, x.scale),
                hoverStrips("entropy", x)],
      });
    }
    return {
      $schema: "https://vega.github.io/schema/vega-lite/v6.json",
      config: CONFIG,
      params: [HIDDEN_PARAM, { name: "hover", views: panels.map((p) => `${p.name}_strips`),
                               select: { type: "point", encodings: ["x"], on: "pointermove", nearest: true,
                                         clear: "pointerout" } }],
      data: { name: "epochs" }, datasets: { epochs: rows },
      vconcat: panels, resolve: { scale: { x: "independent", y: "independent", color: "shared" } },
    };
  }

  function forestSpec(ablation, width) {
    const shared = (label) => ablation.runs.filter((r) => r.label === label).length > 1;
    const rows = ablation.runs.filter((r) => present(r.matched_reward)).map((r) => ({
      // one row per run, even when two runs share a label
      run_id: r.run_id, label: shared(r.label) ? `${r.label} · ${r.run_id}` : r.label,
      matched_reward: r.matched_reward, low: r.matched_ci_low,
      high: r.matched_ci_high, interval: interval(r.matched_ci_low, r.matched_ci_high),
    }));
    const withInterval = rows.some((r) => present(r.low) && present(r.high));
    const horizons = horizonsOf(ablation);
    const y = { field: "label", type: "nominal", title: null, sort: { field: "matched_reward", order: "descending" },
                axis: { labelLimit: 210 } };
    const color = colourEncoding(ablation);
    const tooltip = [{ field: "label", title: "run" }, { field: "matched_reward", title: "matched reward", format: ".3f" },
                     ...(withInterval ? [{ field: "interval", title: `${level} interval` }] : [])];
    const layers = [];
    if (withInterval) {
      layers.push({ transform: [{ filter: "isValid(datum.low) && isValid(datum.high)" }],
                    mark: { type: "rule", strokeWidth: 2.5 },
                    encoding: { y, x: { field: "low", type: "quantitative" }, x2: { field: "high" }, color } });
    }
    layers.push({ mark: { type: "point", shape: "diamond", filled: true, size: 120, opacity: 1, stroke: "#111",
                          strokeWidth: 0.8 },
                  encoding: { y, x: { field: "matched_reward", type: "quantitative", title: "matched reward",
                                      scale: { zero: false } }, color, tooltip } });
    return {
      $schema: "https://vega.github.io/schema/vega-lite/v6.json", config: CONFIG, params: [HIDDEN_PARAM],
      width, height: { step: 30 },
      title: { text: horizons.length === 1 ? `Matched reward at epoch ${horizons[0]}` : "Matched reward",
               subtitle: [`mean of each run's last ${SETTINGS.final_window} epochs ≤ the horizon`,
                          withInterval ? `bars: ${level} interval` : "(no interval for these means)"] },
      data: { values: rows }, transform: [VISIBLE], layer: layers,
    };
  }

  const LEVEL_NAMES = { is_fp_control: { true: "FP-control targets (no planted quirk)", false: "targets with a planted quirk" } };
  const BREAKDOWN_TITLES = { target_model: "Reward by target model", is_fp_control: "Reward by FP-control flag" };

  function breakdownSpec(ablation, width) {
    const kinds = [...new Set(ablation.breakdowns.map((b) => b.breakdown))];
    if (!kinds.length) return null;
    const color = colourEncoding(ablation);
    const charts = kinds.map((kind) => {
      const names = LEVEL_NAMES[kind] || {};
      const rows = ablation.breakdowns.filter((b) => b.breakdown === kind && present(b.mean_reward)).map((b) => ({
        ...b, level_name: names[b.level] || b.level, middle: (b.window_start + b.window_end) / 2,
        window: `epochs ${b.window_start}–${b.window_end}`,
        label: (ablation.runs.find((r) => r.run_id === b.run_id) || { label: b.run_id }).label,
      }));
      const levels = new Set(rows.map((r) => r.level_name)).size || 1;
      return {
        title: { text: BREAKDOWN_TITLES[kind] || `Reward by ${kind}`,
                 subtitle: `mean reward over windows of ${SETTINGS.breakdown_window} epochs` },
        data: { values: rows }, transform: [VISIBLE],
        facet: { column: { field: "level_name", type: "nominal", title: null, header: { labelFontWeight: 600 } } },
        spec: {
          width: Math.max(120, Math.floor((width - 30 * levels) / levels)), height: 130,
          mark: { type: "line", point: { size: 22 }, strokeWidth: 1.6 },
          encoding: {
            x: { field: "middle", type: "quantitative", title: "epoch" },
            y: { field: "mean_reward", type: "quantitative", title: "mean reward", scale: { zero: false } },
            color,
            tooltip: [{ field: "label", title: "run" }, { field: "level_name", title: kind }, { field: "window" },
                      { field: "mean_reward", title: "mean reward", format: ".3f" },
                      { field: "n_trajectories", title: "trajectories" }],
          },
        },
        resolve: { scale: { y: "shared" } },
      };
    });
    return { $schema: "https://vega.github.io/schema/vega-lite/v6.json", config: CONFIG, params: [HIDDEN_PARAM],
             vconcat: charts };
  }

  // ---- tables and controls ---------------------------------------------------------------------------------

  function copyButton(text) {
    const button = el("button", { class: "copy", type: "button", title: "copy to the clipboard" }, "copy");
    button.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(text);
      } catch (error) {
        const area = el("textarea", { style: { position: "fixed", opacity: "0" } }, text);
        document.body.append(area);
        area.select();
        document.execCommand("copy");
        area.remove();
      }
      button.textContent = "copied";
      setTimeout(() => { button.textContent = "copy"; }, 1200);
    });
    return button;
  }

  function runsTable(section) {
    const { ablation } = section;
    const withInterval = ablation.runs.some((r) => "matched_ci_low" in r);
    const withIqm = ablation.runs.some((r) => "matched_iqm" in r);
    const withN = ablation.runs.some((r) => "matched_effective_n" in r);
    const head = el("tr", {}, el("th", {}, ""), el("th", {}, "run"), el("th", { class: "n" }, "epochs"),
                    el("th", { class: "n" }, `final reward`), el("th", { class: "n" }, "peak EMA (epoch)"),
                    el("th", { class: "n" }, "matched reward"), withInterval ? el("th", { class: "n" }, `${level} interval`) : null,
                    withIqm ? el("th", { class: "n", title: "interquartile mean of the matched window" }, "IQM") : null,
                    withN ? el("th", { class: "n", title: "effective sample size of the matched window" }, "effective n") : null);
    const rows = ablation.runs.map((run) => {
      const row = el("tr", { class: "run", "data-run": run.run_id, tabindex: 0,
                             title: "click: hide/show · shift-click: this run only" },
        el("td", {}, el("span", { class: "swatch", style: { background: run.colour } })),
        el("td", {}, el("div", { class: "label" }, run.label),
           run.label === run.run_id ? null : el("div", { class: "id" }, run.run_id)),
        el("td", { class: "n" }, present(run.n_epochs) ? `${run.n_epochs} (${run.first_epoch}–${run.last_epoch})` : "–",
           present(run.missing_epochs) && run.missing_epochs > 0 ? el("div", { class: "id" }, `${run.missing_epochs} missing`) : null),
        el("td", { class: "n" }, num(run.final_reward)),
        el("td", { class: "n" }, `${num(run.peak_reward_ema)} (${present(run.peak_epoch) ? run.peak_epoch : "–"})`),
        el("td", { class: "n" }, num(run.matched_reward)),
        withInterval ? el("td", { class: "n" }, interval(run.matched_ci_low, run.matched_ci_high)) : null,
        withIqm ? el("td", { class: "n" }, num(run.matched_iqm)) : null,
        withN ? el("td", { class: "n" }, num(run.matched_effective_n, 1)) : null);
      row.addEventListener("click", (event) => toggleRun(section, run.run_id, event.shiftKey || event.altKey));
      row.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          toggleRun(section, run.run_id, event.shiftKey);
        }
      });
      section.runRows[run.run_id] = row;
      return row;
    });
    return el("table", { class: "runs" }, el("thead", {}, head), el("tbody", {}, rows));
  }

  /** A run's label with its colour, for the tables. */
  function runName(ablation, runId) {
    const run = ablation.runs.find((r) => r.run_id === runId);
    if (!run) return el("span", { class: "run-name" }, `arm ${runId}`); // a contrast of arms (their seeds resampled)
    return el("span", { class: "run-name", title: runId }, el("span", { class: "swatch", style: { background: run.colour } }),
              run.label);
  }

  /** Whether a contrast is resolved: the warehouse's word (an interval that allows for autocorrelated epochs
   * excludes zero; an iid one resolves nothing), or null when its tables do not say. */
  const resolvedOf = (row) => (row.resolved === undefined ? null : row.resolved);

  function contrastsTable(ablation) {
    const rows = ablation.contrasts;
    if (!rows.length) return el("p", { class: "note" }, "No pair of runs to compare in this ablation.");
    const has = (column) => rows.some((r) => r[column] !== undefined && r[column] !== null);
    const head = el("tr", {}, el("th", {}, "run A"), el("th", {}, "run B"), el("th", { class: "n" }, "Δ matched reward (B − A)"),
                    el("th", { class: "n" }, `${level} interval`), has("ci_method") ? el("th", {}, "method") : null,
                    has("unit") ? el("th", {}, "unit") : null, el("th", { class: "n" }, "P(B > A)"),
                    el("th", {}, "resolved"));
    const body = rows.map((r) => {
      const resolved = resolvedOf(r);
      const verdict = resolved === null ? "–" : resolved ? `yes: ${r.delta > 0 ? "B" : "A"} ahead` : "no";
      return el("tr", {},
        el("td", {}, runName(ablation, r.run_a)), el("td", {}, runName(ablation, r.run_b)),
        el("td", { class: "n" }, signed(r.delta)), el("td", { class: "n" }, interval(r.ci_low, r.ci_high)),
        has("ci_method") ? el("td", {}, r.ci_method ?? "–") : null, has("unit") ? el("td", {}, r.unit ?? "–") : null,
        el("td", { class: "n" }, num(r.prob_improvement)),
        el("td", { class: resolved ? "yes" : "no" }, verdict));
    });
    const note = has("resolved")
      ? "Resolved: an interval that allows for autocorrelated epochs excludes zero (an iid interval, which treats "
        + "them as independent and is far too narrow, resolves nothing). Unit: epochs of one run, a claim about "
        + "these two runs; runs, a claim about configurations whose seeds are resampled."
      : "These intervals resample epochs as if independent; per-epoch rewards are autocorrelated, so they are too "
        + "narrow to resolve anything.";
    return el("div", {}, el("table", { class: "data" }, el("thead", {}, head), el("tbody", {}, body)),
              el("p", { class: "note" }, `Δ and P(B > A) compare the matched windows. ${note}`));
  }

  function snapshotsTable(ablation) {
    if (!ablation.snapshots.length) return el("p", { class: "note" }, "No snapshots.");
    const body = ablation.snapshots.map((s) => el("tr", {},
      el("td", {}, runName(ablation, s.run_id)), el("td", {}, s.role), el("td", { class: "n" }, present(s.epoch) ? s.epoch : "–"),
      el("td", { class: "model" }, s.model_name ? [el("code", { class: "model" }, s.model_name), " ", copyButton(s.model_name)]
                                                : "–")));
    return el("table", { class: "data" },
      el("thead", {}, el("tr", {}, el("th", {}, "run"), el("th", {}, "role"), el("th", { class: "n" }, "epoch"),
                          el("th", {}, "model name (call it by this)"))),
      el("tbody", {}, body));
  }

  function headline(ablation) {
    const scored = ablation.runs.filter((r) => present(r.matched_reward))
      .sort((a, b) => b.matched_reward - a.matched_reward);
    const horizons = horizonsOf(ablation);
    const at = horizons.length === 1 ? `epoch ${horizons[0]}` : "the compute-matched horizon";
    if (!scored.length) return "No run has a matched reward yet.";
    const best = scored[0];
    if (scored.length === 1) return `${best.label}: matched reward ${num(best.matched_reward)} at ${at}.`;
    const second = scored[1];
    const row = ablation.contrasts.find((c) => (c.run_a === best.run_id && c.run_b === second.run_id)
                                            || (c.run_a === second.run_id && c.run_b === best.run_id));
    let text = `At ${at}, ${best.label} leads with a matched reward of ${num(best.matched_reward)}, `
      + `against ${num(second.matched_reward)} for ${second.label}`;
    if (row && present(row.ci_low) && present(row.ci_high)) {
      const flip = row.run_a === best.run_id; // the row is B − A: turn it into leader − runner-up
      const lo = flip ? -row.ci_high : row.ci_low;
      const hi = flip ? -row.ci_low : row.ci_high;
      const resolved = resolvedOf(row);
      text += `: Δ ${signed(flip ? -row.delta : row.delta)}, ${level} interval ${interval(lo, hi)}`;
      if (row.ci_method === "iid" || resolved === null) {
        text += ", which treats autocorrelated epochs as independent: too narrow to resolve anything.";
      } else if (resolved) {
        text += row.unit === "runs" ? ": resolved, for the configurations." : ": resolved, for these two runs.";
      } else {
        text += ", which includes zero: not resolved.";
      }
    } else {
      text += ".";
    }
    return text;
  }

  // ---- the hover readout -----------------------------------------------------------------------------------

  function epochOf(value) {
    if (value === null || value === undefined) return null;
    if (typeof value === "number") return value;
    if (Array.isArray(value)) return epochOf(value[0]);
    if (typeof value === "object") {
      if ("epoch" in value) return epochOf(value.epoch);
      if (Array.isArray(value.values)) return epochOf(value.values[0]);
    }
    return null;
  }

  function showReadout(section, epoch) {
    const box = section.readout;
    section.hoverEpoch = epoch;
    if (epoch === null) {
      box.hidden = true;
      return;
    }
    const atEpoch = section.ablation.runs.filter((run) => !section.hidden.has(run.run_id))
      .map((run) => [run, section.rowsByRun.get(run.run_id)?.get(epoch)]).filter(([, row]) => row)
      .sort(([, a], [, b]) => (present(b.smoothed) ? b.smoothed : -Infinity) - (present(a.smoothed) ? a.smoothed : -Infinity));
    const rows = atEpoch.map(([run, row]) => el("tr", {},
      el("td", {}, el("span", { class: "swatch", style: { background: run.colour } })),
      el("td", { class: "label" }, run.label),
      el("td", { class: "n" }, num(row.smoothed)), el("td", { class: "n" }, num(row.reward)),
      el("td", { class: "n" }, percent(row.flat)), el("td", {}, el("code", {}, modelName(row.snapshot_id)))));
    box.replaceChildren(
      el("div", { class: "epoch" }, `epoch ${epoch}`),
      el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, ""), el("th", {}, "run"), el("th", { class: "n" }, "smoothed"),
                                          el("th", { class: "n" }, "mean reward"), el("th", { class: "n" }, "flat groups"),
                                          el("th", {}, "snapshot model name"))),
         el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: 6 }, "no visible run has this epoch")))));
    box.hidden = false;
    placeReadout(section);
  }

  function placeReadout(section) {
    const box = section.readout;
    const pointer = section.pointer;
    if (box.hidden || !pointer) return;
    const host = box.parentElement.getBoundingClientRect();
    const left = pointer.clientX - host.left;
    const room = host.width - left - 24;
    box.style.left = `${room > box.offsetWidth ? left + 18 : Math.max(0, left - box.offsetWidth - 18)}px`;
    box.style.top = `${Math.max(0, pointer.clientY - host.top + 14)}px`;
  }

  // ---- drawing and state -----------------------------------------------------------------------------------

  // Vega warns of an "infinite extent" whenever a hover layer's filter leaves it empty (no pointer on the chart):
  // expected, so only errors reach the console (1 is Vega's log level Error).
  const EMBED = { actions: false, renderer: "svg", tooltip: { theme: "light" }, logLevel: 1 };
  // SVG keeps every mark an element (crisp, inspectable); past this many epoch rows a canvas draws faster
  const SVG_ROWS = 40000;

  function indexRows(rows) {
    const byRun = new Map();
    for (const row of rows) {
      if (!byRun.has(row.run_id)) byRun.set(row.run_id, new Map());
      byRun.get(row.run_id).set(row.epoch, row);
    }
    return byRun;
  }

  async function drawSection(section) {
    const { ablation, nodes } = section;
    section.views.forest = (await vegaEmbed(nodes.forest, forestSpec(ablation, 170), EMBED)).view;
    // the curves take the room the forest leaves, less their y axis and title beside the plot
    const curvesWidth = Math.max(360, nodes.charts.clientWidth - nodes.forest.offsetWidth - 24 - 90);
    section.rows = epochRows(ablation, explorer.weight);
    section.rowsByRun = indexRows(section.rows);
    const curves = await vegaEmbed(nodes.curves, curvesSpec(ablation, curvesWidth, section.rows),
                                   { ...EMBED, renderer: section.rows.length > SVG_ROWS ? "canvas" : "svg" });
    section.views.curves = curves.view;
    curves.view.addSignalListener("hover", (_, value) => showReadout(section, epochOf(value)));
    nodes.curves.addEventListener("pointermove", (event) => { section.pointer = event; placeReadout(section); });
    nodes.curves.addEventListener("pointerleave", () => showReadout(section, null));
    const breakdowns = breakdownSpec(ablation, nodes.charts.clientWidth - 120);
    if (breakdowns) section.views.breakdowns = (await vegaEmbed(nodes.breakdowns, breakdowns, EMBED)).view;
  }

  async function setWeight(weight) {
    explorer.weight = weight;
    for (const section of explorer.sections) {
      section.rows = epochRows(section.ablation, weight);
      section.rowsByRun = indexRows(section.rows);
      if (section.views.curves) await section.views.curves.data("epochs", section.rows).runAsync();
      if (!section.readout.hidden) showReadout(section, section.hoverEpoch);
    }
  }
  explorer.setWeight = setWeight;

  async function toggleRun(section, runId, only) {
    const all = section.ablation.runs.map((r) => r.run_id);
    if (only) {
      const alone = section.hidden.size === all.length - 1 && !section.hidden.has(runId);
      section.hidden = new Set(alone ? [] : all.filter((id) => id !== runId));
    } else if (section.hidden.has(runId)) {
      section.hidden.delete(runId);
    } else {
      section.hidden.add(runId);
    }
    for (const [id, row] of Object.entries(section.runRows)) row.classList.toggle("off", section.hidden.has(id));
    const hidden = [...section.hidden];
    await Promise.all(Object.values(section.views).map((view) => view.signal("hidden", hidden).runAsync()));
  }
  explorer.toggleRun = (sectionIndex, runId, only = false) => toggleRun(explorer.sections[sectionIndex], runId, only);

  function sectionFor(ablation, index) {
    const nodes = {
      curves: el("div", { class: "curves" }), forest: el("div", { class: "forest" }),
      breakdowns: el("div", { class: "breakdowns" }),
    };
    const section = { ablation, nodes, views: {}, hidden: new Set(), runRows: {}, pointer: null, readout: null,
                      hoverEpoch: null };
    section.readout = el("div", { class: "readout", hidden: true });
    nodes.charts = el("div", { class: "charts" }, el("div", { class: "curves-host" }, nodes.curves, section.readout),
                      nodes.forest);
    const runs = ablation.runs.length;
    const horizons = horizonsOf(ablation);
    const summary = `${runs} run${runs === 1 ? "" : "s"}` + (horizons.length === 1 ? ` · compute-matched at epoch ${horizons[0]}` : "");
    const node = el("section", { class: "ablation", id: `ablation-${index}` },
      el("h2", {}, `Ablation “${ablation.name ?? "unassigned"}”`, el("span", { class: "sub" }, summary)),
      el("p", { class: "headline" }, headline(ablation)),
      runsTable(section), nodes.charts, nodes.breakdowns,
      el("div", { class: "tables" },
         el("div", {}, el("h3", {}, "Contrasts at the compute-matched horizon"), contrastsTable(ablation)),
         el("div", {}, el("h3", {}, "Snapshots"), snapshotsTable(ablation))));
    section.node = node;
    return section;
  }

  function toolbar(withControls) {
    const value = el("output", { class: "weight" }, explorer.weight.toFixed(3));
    const slider = el("input", { type: "range", min: 0, max: Math.max(MAX_WEIGHT, SETTINGS.ema_weight), step: 0.001,
                                 value: SETTINGS.ema_weight, id: "smoothing", "aria-label": "smoothing weight" });
    let pending = null;
    const apply = (weight) => {
      value.textContent = weight.toFixed(3);
      pending = weight;
      requestAnimationFrame(() => {
        if (pending !== null) {
          const w = pending;
          pending = null;
          setWeight(w);
        }
      });
    };
    slider.addEventListener("input", () => apply(Number(slider.value)));
    const reset = el("button", { type: "button", class: "reset", title: "the warehouse's ema_weight: the line then equals reward_ema" },
                     `configured (${SETTINGS.ema_weight})`);
    reset.addEventListener("click", () => { slider.value = SETTINGS.ema_weight; apply(SETTINGS.ema_weight); });
    return el("div", { class: "toolbar" },
      el("div", { class: "brand" }, DATA.index ? el("a", { href: DATA.index }, "← all ablations") : null,
         el("strong", {}, "GRPO run explorer")),
      withControls ? el("label", { class: "smoothing", for: "smoothing" }, "Smoothing", slider, value, reset) : null,
      withControls ? el("div", { class: "hint" }, "scroll on a chart: zoom epochs · drag: pan · double-click: reset · "
        + "click a run: hide/show · shift-click: that run only") : null);
  }

  function overview() {
    const rows = DATA.overview.map((ablation) => el("tr", {},
      el("td", { class: "model" }, el("a", { href: ablation.page }, ablation.name ?? "unassigned")),
      el("td", { class: "n" }, ablation.runs.length), el("td", {}, headline(ablation))));
    return el("section", { class: "ablation" },
      el("h2", {}, "Ablations", el("span", { class: "sub" }, `${DATA.overview.length}, one page each`)),
      el("table", { class: "data" },
         el("thead", {}, el("tr", {}, el("th", {}, "ablation"), el("th", { class: "n" }, "runs"),
                             el("th", {}, "at the compute-matched horizon"))),
         el("tbody", {}, rows)));
  }

  async function main() {
    const footer = el("footer", {}, `Drawn with ${DATA.library}, inlined: this page needs no network. `
      + `Smoothing: TensorBoard's debiased EMA; at ${SETTINGS.ema_weight} it equals reward_ema. `
      + `Matched reward: mean of the last ${SETTINGS.final_window} epochs at or before the horizon.`);
    root.replaceChildren(toolbar(DATA.ablations.length > 0));
    if (DATA.overview) root.append(overview());
    explorer.sections = DATA.ablations.map(sectionFor);
    for (const section of explorer.sections) root.append(section.node);
    if (!DATA.ablations.length && !DATA.overview) root.append(el("p", { class: "note" }, "No runs in this warehouse yet."));
    root.append(footer);
    for (const section of explorer.sections) await drawSection(section);
  }

  explorer.ready = main().then(() => true, (error) => {
    explorer.errors.push(String(error && error.stack || error));
    root.append(el("pre", { class: "error" }, `The explorer could not draw: ${error}`));
    throw error;
  });
})();

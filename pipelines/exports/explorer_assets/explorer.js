/* The run explorer's script: inflates the page's library and data, draws each ablation with Vega-Lite, wires the controls. */
(function () {
  "use strict";

  const root = document.getElementById("explorer");
  const explorer = { weight: null, sections: [], ready: null, errors: [], data: null };
  window.explorer = explorer; // the tests read the page's data through it; handy in the console too
  let DATA = null;
  let SETTINGS = null;
  const MAX_WEIGHT = 0.999;
  explorer.readoutRows = 8; // the hover box lists this many lines, then "n more"
  const POINT_LINES = 8; // faint per-epoch points are drawn while at most this many lines are
  const LABEL_ROOM = 44; // characters of a label in the charts: longer ones lose their middle, never their end
  const VL_SCHEMA = "https://vega.github.io/schema/vega-lite/v6.json";

  /** The text of a gzip-compressed, base64 script element (the page's library and data). */
  async function inflate(id) {
    const binary = atob(document.getElementById(id).textContent.trim());
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).text();
  }

  // ---- numbers ---------------------------------------------------------------------------------------------

  /** TensorBoard's debiased EMA, as epoch_metrics.reward_ema computes it: last = w·last + (1−w)·y and n += 1
   * for a finite y, value last / (1 − wⁿ) (w = 1 is not debiased); a missing y is its own value and is not counted. */
  function ema(values, weight) {
    const out = new Array(values.length);
    let last = 0;
    let count = 0;
    for (let i = 0; i < values.length; i++) {
      const y = values[i];
      if (y === null || y === undefined || !Number.isFinite(y)) {
        out[i] = y === undefined ? null : y;
        continue;
      }
      last = last * weight + (1 - weight) * y;
      count += 1;
      out[i] = weight === 1 ? last : last / (1 - Math.pow(weight, count));
    }
    return out;
  }
  explorer.ema = ema;

  /** The q-quantile of sorted values, interpolated linearly (numpy's default). */
  function quantile(sorted, q) {
    const at = (sorted.length - 1) * q;
    const lo = Math.floor(at);
    const hi = Math.ceil(at);
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (at - lo);
  }

  /** The interquartile mean of sorted values: the mean of what is left when a quarter is cut from each end (as
   * scipy's trim_mean(x, 0.25) and rliable's IQM cut). */
  function iqm(sorted) {
    const cut = Math.floor(sorted.length / 4);
    const kept = sorted.slice(cut, sorted.length - cut);
    return kept.reduce((a, b) => a + b, 0) / kept.length;
  }
  explorer.iqm = iqm;

  const present = (v) => v !== null && v !== undefined && Number.isFinite(v);
  const num = (v, digits = 3) => (present(v) ? v.toFixed(digits) : "–");
  const signed = (v) => (present(v) ? (v > 0 ? "+" : "") + v.toFixed(3) : "–");
  const percent = (v) => (present(v) ? (100 * v).toFixed(1) + "%" : "–");
  const interval = (lo, hi) => (present(lo) && present(hi) ? `[${num(lo)}, ${num(hi)}]` : "–");
  const general = (v) => (present(v) ? (Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(3)
                                                                                               : v.toFixed(4)) : "–");
  const plural = (n, word) => `${n.toLocaleString("en")} ${word}${n === 1 ? "" : "s"}`;
  let level = "95%";

  /** A label for a chart, at most max characters: a long one keeps its start and its end (where a seed number or a
   * run's distinguishing suffix is), and loses its middle. */
  function shortLabel(text, max = LABEL_ROOM) {
    const s = String(text);
    if (s.length <= max) return s;
    const tail = Math.ceil((max - 1) / 2);
    return s.slice(0, max - 1 - tail) + "…" + s.slice(s.length - tail);
  }
  explorer.shortLabel = shortLabel;

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

  // ---- what a section shows --------------------------------------------------------------------------------

  const METRIC_TITLES = {
    mean_reward: "mean reward", frac_zero_std_groups: "share of flat groups (no learning signal)",
    sample_entropy: "sample entropy", train_entropy: "train entropy", kl_sample_train: "KL (sample ‖ train)",
    transcript_chars: "transcript characters", transcript_chars_top_third: "transcript characters, top third by reward",
    transcript_chars_bottom_third: "transcript characters, bottom third by reward", transcript_turns: "transcript turns",
    transcript_tool_calls: "transcript tool calls",
  };
  // Measures of the transcripts, which only some epochs have: drawn as they are, a smoothing over so few points
  // would lag by many epochs.
  const unsmoothed = (metric) => metric.startsWith("transcript_");
  const metricTitle = (m) => METRIC_TITLES[m] || m;
  const X_TITLES = { epoch: "epoch", trajectories: "trajectories seen" };

  function configurationOf(section, run) {
    return section.configs.get(run.arm) || null;
  }

  /** What tells a seed from the other seeds of its configuration: its label after the configuration's name. */
  function seedName(section, run) {
    const config = configurationOf(section, run);
    if (!config || !run.label.startsWith(config.label)) return run.label;
    const rest = run.label.slice(config.label.length).replace(/^[\s·,;:\-_/|]+/, "");
    return rest || run.label;
  }

  function matchesFilter(section, run) {
    const text = section.state.filter.trim().toLowerCase();
    if (!text) return true;
    const config = configurationOf(section, run);
    return [run.label, run.run_id, config ? config.label : ""].some((s) => s.toLowerCase().includes(text));
  }

  /** The runs drawn: not hidden by a click, matching the filter, of the configuration shown alone (if one is). */
  function visibleRuns(section) {
    const { state } = section;
    return section.ablation.runs.filter((run) => !section.hidden.has(run.run_id) && matchesFilter(section, run)
                                        && (state.only === null || run.arm === state.only));
  }

  function grouped(section) {
    return section.state.grouped && section.configs.size > 0;
  }

  /** The lines of the charts: a configuration each when grouped (its visible seeds), else a run each. */
  function units(section) {
    const runs = visibleRuns(section);
    if (!grouped(section)) {
      return runs.map((run) => ({ key: run.run_id, label: run.label, colour: run.colour, runs: [run], run }));
    }
    const byArm = new Map();
    for (const run of runs) {
      if (!byArm.has(run.arm)) byArm.set(run.arm, []);
      byArm.get(run.arm).push(run);
    }
    return [...byArm].map(([arm, seeds]) => {
      const config = section.configs.get(arm) || { arm, label: arm, colour: seeds[0].colour, value: null };
      return { key: arm, label: config.label, colour: config.colour, runs: seeds, config };
    });
  }

  function panelsOf(section) {
    const has = (m) => section.ablation.metrics.includes(m);
    const panels = [{ name: "main", metrics: [section.state.metric], height: 320 }];
    if (section.ablation.overlay) return panels;
    if (has("frac_zero_std_groups")) panels.push({ name: "flat", metrics: ["frac_zero_std_groups"], height: 120 });
    const entropies = ["sample_entropy", "train_entropy"].filter(has);
    if (entropies.length) panels.push({ name: "entropy", metrics: entropies, height: 120 });
    const lengths = ["transcript_chars", "transcript_chars_top_third"].filter(has);
    if (lengths.length) panels.push({ name: "transcripts", metrics: lengths, height: 120, axis: "characters" });
    return panels;
  }

  // ---- the rows the charts draw ----------------------------------------------------------------------------

  /** A run's x values on the chosen axis: its epochs, or the trajectories seen by the end of each. */
  function xsOf(section, series) {
    return section.state.x === "trajectories" && series.trajectories ? series.trajectories : series.epoch;
  }

  /** Smoothed values of one run's metric, kept per weight (the slider recomputes only what it changes). */
  function smoothedOf(section, runId, metric) {
    const key = `${runId}\u0000${metric}`;
    const kept = section.smoothed.get(key);
    if (kept && kept.weight === explorer.weight) return kept.values;
    const series = section.ablation.series[runId];
    const raw = series && series[metric];
    const values = raw ? (unsmoothed(metric) ? raw : ema(raw, explorer.weight)) : null;
    section.smoothed.set(key, { weight: explorer.weight, values });
    return values;
  }

  function usable(section, panel, y) {
    return present(y) && !(section.state.log && panel.name === "main" && y <= 0);
  }

  /** The epochs of a configuration's seeds, merged: per epoch, each seed's position in its own series (or -1).
   * Kept until the seeds drawn change: the slider only changes values. */
  function alignedSeeds(section, unit) {
    const key = unit.runs.map((r) => r.run_id).join("\u0000");
    const kept = section.aligned.get(unit.key);
    if (kept && kept.key === key) return kept;
    const series = unit.runs.map((run) => section.ablation.series[run.run_id]).filter(Boolean);
    const epochs = [...new Set(series.flatMap((s) => s.epoch))].sort((a, b) => a - b);
    const positions = series.map((s) => {
      const at = new Map(s.epoch.map((e, i) => [e, i]));
      return Int32Array.from(epochs, (e) => (at.has(e) ? at.get(e) : -1));
    });
    const aligned = { key, epochs, series, runs: unit.runs.filter((r) => section.ablation.series[r.run_id]), positions };
    section.aligned.set(unit.key, aligned);
    return aligned;
  }

  /** Per configuration and epoch: the IQM of its seeds' smoothed values and their quartiles. */
  function configurationLine(section, unit, panel, metric) {
    const { epochs, series, runs, positions } = alignedSeeds(section, unit);
    const values = runs.map((run) => smoothedOf(section, run.run_id, metric));
    const xs = series.map((s) => xsOf(section, s));
    const points = [];
    const ys = [];
    for (let e = 0; e < epochs.length; e++) {
      ys.length = 0;
      let x = 0;
      for (let r = 0; r < runs.length; r++) {
        const i = positions[r][e];
        if (i < 0 || !values[r] || !present(values[r][i])) continue;
        ys.push(values[r][i]);
        x += xs[r][i];
      }
      if (!ys.length) continue;
      ys.sort((a, b) => a - b);
      const y = iqm(ys);
      if (usable(section, panel, y)) {
        points.push({ epoch: epochs[e], x: x / ys.length, y, lo: quantile(ys, 0.25), hi: quantile(ys, 0.75), n: ys.length });
      }
    }
    return points;
  }

  function runLine(section, run, panel, metric) {
    const series = section.ablation.series[run.run_id];
    const values = series && smoothedOf(section, run.run_id, metric);
    if (!values) return [];
    const xs = xsOf(section, series);
    const raw = series[metric];
    const points = [];
    for (let i = 0; i < series.epoch.length; i++) {
      if (usable(section, panel, values[i])) {
        points.push({ epoch: series.epoch[i], x: xs[i], y: values[i], raw: raw[i],
                      snapshot: series.snapshot_id ? series.snapshot_id[i] : null });
      }
    }
    return points;
  }

  /** Every dataset of the curves chart (one per panel, metric and kind, so no layer filters another's rows), and
   * per panel the lines the hover box and the downloads read. */
  function chartData(section) {
    const datasets = { strips: [], matched: [], horizons: [] };
    const lines = {};
    const seeds = grouped(section) && section.state.seeds;
    const drawn = units(section);
    const xs = new Set();
    datasets.main_points = [];
    for (const panel of section.panels) {
      lines[panel.name] = [];
      datasets[`${panel.name}_bands`] = [];
      panel.metrics.forEach((metric, m) => {
        const solid = (datasets[`${panel.name}_${m}`] = []);
        const faint = (datasets[`${panel.name}_${m}_faint`] = []);
        for (const unit of drawn) {
          const points = unit.config ? configurationLine(section, unit, panel, metric) : runLine(section, unit.run, panel, metric);
          lines[panel.name].push({ unit, metric, points });
          for (const p of points) {
            solid.push({ key: unit.key, colour: unit.colour, x: p.x, y: p.y });
            xs.add(p.x);
            if (unit.config && p.n > 1 && m === 0 && panel.name === "main") {
              datasets[`${panel.name}_bands`].push({ key: unit.key, colour: unit.colour, x: p.x, lo: p.lo, hi: p.hi });
            }
          }
          if (seeds && panel.name === "main") {
            for (const run of unit.runs) {
              for (const p of runLine(section, run, panel, metric)) {
                faint.push({ key: run.run_id, colour: unit.colour, x: p.x, y: p.y });
              }
            }
          }
        }
      });
    }
    rawPoints(section, drawn, datasets);
    matchedMarks(section, drawn, datasets);
    datasets.strips = [...xs].sort((a, b) => a - b).map((x) => ({ x }));
    return { datasets, lines };
  }

  /** Faint points at each epoch's own value, while few lines are drawn (under many they only cover the lines). */
  function rawPoints(section, drawn, datasets) {
    const runs = grouped(section) ? (section.state.seeds ? drawn.flatMap((u) => u.runs) : []) : drawn.map((u) => u.run);
    if (runs.length > POINT_LINES) return;
    const metric = section.state.metric;
    const panel = section.panels[0];
    for (const run of runs) {
      const series = section.ablation.series[run.run_id];
      if (!series || !series[metric]) continue;
      const xs = xsOf(section, series);
      series[metric].forEach((y, i) => {
        if (usable(section, panel, y)) datasets.main_points.push({ key: run.run_id, colour: run.colour, x: xs[i], y });
      });
    }
  }

  /** The compute-matched horizon and each line's matched reward there, on the reward chart by epoch. */
  function matchedMarks(section, drawn, datasets) {
    if (section.state.metric !== "mean_reward" || section.state.x !== "epoch" || section.ablation.overlay) return;
    datasets.horizons = horizonsOf(section.ablation).map((h) => ({ x: h }));
    for (const unit of drawn) {
      if (unit.config) {
        const horizon = unit.runs.map((r) => r.matched_horizon).find(present);
        if (present(unit.config.value) && present(horizon)) {
          datasets.matched.push({ key: unit.key, colour: unit.colour, x: horizon, y: unit.config.value });
        }
      } else if (present(unit.run.matched_reward) && present(unit.run.matched_horizon)) {
        datasets.matched.push({ key: unit.key, colour: unit.colour, x: unit.run.matched_horizon, y: unit.run.matched_reward });
      }
    }
  }

  function horizonsOf(ablation) {
    return [...new Set(ablation.runs.map((r) => r.matched_horizon).filter(present))].sort((a, b) => a - b);
  }

  // ---- Vega-Lite specs -------------------------------------------------------------------------------------

  const CONFIG = {
    font: "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif",
    view: { stroke: null },
    mark: { invalid: "show" }, // the page gives only finite values: no filter to run on every row
    axis: { labelColor: "#444", titleColor: "#333", gridColor: "#eceef1", domainColor: "#999", tickColor: "#999",
            labelFontSize: 11, titleFontSize: 11, titleFontWeight: "normal" },
    title: { anchor: "start", fontSize: 13, fontWeight: 600, subtitleColor: "#666", subtitleFontSize: 11, offset: 6 },
    header: { labelFontSize: 11, labelColor: "#333" },
    concat: { spacing: 18 },
  };
  const COLOUR = { field: "colour", type: "nominal", scale: null, legend: null };

  function panelTitle(section, panel) {
    const smoothing = panel.name === "main" && unsmoothed(section.state.metric) ? "not smoothed" : "smoothed";
    const [group, members] = section.ablation.overlay ? ["ablation", "runs"] : ["configuration", "seeds"];
    const what = grouped(section)
      ? `line: the IQM of each ${group}'s ${members}, ${smoothing} · band: their middle half (25th–75th percentile)`
        + (section.state.seeds ? ` · thin: each of the ${members}` : "")
      : `line: each run, ${smoothing}` + (section.state.seeds || !grouped(section) ? " · faint points: per-epoch values while few lines are drawn" : "");
    if (panel.name === "main") {
      const log = section.state.log ? " · log scale (values ≤ 0 left out)" : "";
      const matched = section.state.metric === "mean_reward" && section.state.x === "epoch" && !section.ablation.overlay
        ? " · diamonds: matched reward" : "";
      return { text: metricTitle(section.state.metric), subtitle: what + matched + log };
    }
    if (panel.name === "flat") return { text: "Groups with no learning signal", subtitle: "share of groups whose rewards are all equal (zero advantage), smoothed" };
    if (panel.name === "transcripts") {
      return { text: "Transcript length", subtitle: "characters of content per transcript, in epochs with transcripts · solid: "
               + "mean of the epoch's · dashed: of its top third by reward · not smoothed" };
    }
    return { text: "Entropy", subtitle: "solid: sample entropy · dashed: train entropy, smoothed" };
  }

  function panelSpec(section, panel, width, x) {
    const y = (field, extra) => ({ field, type: "quantitative", title: panel.axis || panel.metrics.map(metricTitle).join(" / "),
                                   scale: { zero: false, ...(panel.name === "main" && section.state.log ? { type: "log" } : {}) },
                                   ...(panel.name === "flat" ? { axis: { format: "%" } } : {}), ...extra });
    const data = (kind) => ({ name: `${panel.name}_${kind}` });
    const layers = [
      { data: data("bands"), mark: { type: "area", opacity: 0.16, clip: true },
        encoding: { x, y: y("lo"), y2: { field: "hi" }, color: COLOUR, detail: { field: "key" } } },
    ];
    panel.metrics.forEach((_, m) => {
      const dash = m > 0 ? { strokeDash: [5, 3] } : {};
      layers.push({ data: data(`${m}_faint`), mark: { type: "line", strokeWidth: 1, opacity: 0.35, clip: true, ...dash },
                    encoding: { x, y: y("y"), color: COLOUR, detail: { field: "key" } } });
      layers.push({ data: data(m), mark: { type: "line", strokeWidth: m > 0 ? 1.4 : 2.1, clip: true, ...dash },
                    encoding: { x, y: y("y"), color: COLOUR, detail: { field: "key" } } });
    });
    if (panel.name === "main") {
      layers.unshift({ data: data("points"), mark: { type: "circle", size: 9, opacity: 0.3, clip: true },
                       encoding: { x, y: y("y"), color: COLOUR } });
      layers.push({ data: { name: "matched" },
                    mark: { type: "point", shape: "diamond", filled: true, size: 110, opacity: 1, stroke: "#111",
                            strokeWidth: 0.8, clip: true },
                    encoding: { x, y: y("y"), color: COLOUR } });
    }
    layers.push({ data: { name: "horizons" }, mark: { type: "rule", strokeDash: [5, 4], color: "#333", strokeWidth: 1.2, clip: true },
                  encoding: { x } });
    layers.push({ data: { name: "strips" }, transform: [{ filter: { param: "hover", empty: false } }],
                  mark: { type: "rule", color: "#777", strokeWidth: 1, clip: true }, encoding: { x } });
    // the hover target, above every mark: a mark under a still pointer would take it from the strips
    layers.push({ name: `${panel.name}_strips`, data: { name: "strips" }, mark: { type: "point", opacity: 0, size: 1 },
                  encoding: { x } });
    if (panel.name === "main") layers[0].params = [{ name: "zoom", select: { type: "interval", encodings: ["x"] }, bind: "scales" }];
    return { name: panel.name, width, height: panel.height, title: panelTitle(section, panel), layer: layers };
  }

  function curvesSpec(section, width, datasets) {
    const title = X_TITLES[section.state.x];
    const own = { field: "x", type: "quantitative", title, scale: { nice: false, zero: false } };
    const zoomed = { field: "x", type: "quantitative", title, scale: { domain: { param: "zoom", encoding: "x" }, nice: false, zero: false } };
    const panels = section.panels.map((panel, i) => panelSpec(section, panel, width, i === 0 ? own : zoomed));
    return {
      $schema: VL_SCHEMA, config: CONFIG,
      params: [{ name: "hover", views: panels.map((p) => `${p.name}_strips`),
                 select: { type: "point", encodings: ["x"], on: "pointermove", nearest: true, clear: "pointerout" } }],
      datasets, vconcat: panels, resolve: { scale: { x: "independent", y: "independent" } },
    };
  }

  /** The matched reward of each line: a run with its interval, or a configuration's IQM with its seeds as dots. */
  function forestSpec(section, width) {
    const drawn = units(section);
    const names = new Map();
    const rows = [];
    const seeds = [];
    for (const unit of drawn) {
      let name = shortLabel(unit.label, 34);
      while (names.has(name)) name = shortLabel(`${unit.label} · ${unit.key}`, 34) + " ".repeat(names.size % 3 + 1);
      names.set(name, unit.key);
      const value = unit.config ? unit.config.value : unit.run.matched_reward;
      rows.push({ name, full: unit.label, colour: unit.colour, value, low: unit.config ? null : unit.run.matched_ci_low,
                  high: unit.config ? null : unit.run.matched_ci_high,
                  interval: unit.config ? `${plural(unit.runs.length, "seed")} shown` : interval(unit.run.matched_ci_low, unit.run.matched_ci_high) });
      if (unit.config) {
        for (const run of unit.runs) if (present(run.matched_reward)) seeds.push({ name, colour: unit.colour, value: run.matched_reward, seed: seedName(section, run) });
      }
    }
    const order = rows.filter((r) => present(r.value)).sort((a, b) => b.value - a.value).map((r) => r.name)
      .concat(rows.filter((r) => !present(r.value)).map((r) => r.name));
    const y = { field: "name", type: "nominal", title: null, sort: order, axis: { labelLimit: 400 } };
    const x = { type: "quantitative", title: grouped(section) ? "matched reward (IQM of seeds)" : "matched reward", scale: { zero: false } };
    const withInterval = rows.some((r) => present(r.low) && present(r.high));
    const horizons = horizonsOf(section.ablation);
    const layers = [
      { data: { values: rows }, transform: [{ filter: "isValid(datum.low) && isValid(datum.high)" }], mark: { type: "rule", strokeWidth: 2.5 },
        encoding: { y, x: { field: "low", ...x }, x2: { field: "high" }, color: COLOUR } },
      { data: { values: seeds }, mark: { type: "circle", size: 30, opacity: 0.55 },
        encoding: { y, x: { field: "value", ...x }, color: COLOUR, tooltip: [{ field: "seed", title: "seed" }, { field: "value", title: "matched reward", format: ".3f" }] } },
      { data: { values: rows }, transform: [{ filter: "isValid(datum.value)" }],
        mark: { type: "point", shape: "diamond", filled: true, size: 120, opacity: 1, stroke: "#111", strokeWidth: 0.8 },
        encoding: { y, x: { field: "value", ...x }, color: COLOUR,
                    tooltip: [{ field: "full", title: grouped(section) ? "configuration" : "run" }, { field: "value", title: "matched reward", format: ".3f" },
                              { field: "interval", title: grouped(section) ? "seeds" : `${level} interval` }] } },
    ];
    const subtitle = grouped(section)
      ? ["diamond: IQM of the seeds' matched rewards (ablation_contrasts)", "dots: each seed"]
      : [`mean of each run's last ${SETTINGS.final_window} epochs ≤ the horizon`, withInterval ? `bars: ${level} interval` : "(no interval for these means)"];
    return { $schema: VL_SCHEMA, config: CONFIG, width, height: { step: 26 },
             title: { text: horizons.length === 1 ? `Matched reward at epoch ${horizons[0]}` : "Matched reward", subtitle },
             layer: layers };
  }

  const LEVEL_NAMES = { is_fp_control: { true: "FP-control targets (no planted quirk)", false: "targets with a planted quirk" } };
  const BREAKDOWN_TITLES = { target_model: "Reward by target model", is_fp_control: "Reward by FP-control flag" };

  /** The reward by target model and FP-control flag, per line: a configuration's is the mean of its seeds'. */
  function breakdownSpec(section, width) {
    const breakdowns = section.ablation.breakdowns || [];
    const kinds = [...new Set(breakdowns.map((b) => b.breakdown))];
    if (!kinds.length) return null;
    const unitOf = new Map();
    for (const unit of units(section)) for (const run of unit.runs) unitOf.set(run.run_id, unit);
    const charts = kinds.map((kind) => {
      const names = LEVEL_NAMES[kind] || {};
      const cells = new Map();
      for (const b of breakdowns) {
        const unit = unitOf.get(b.run_id);
        if (b.breakdown !== kind || !unit || !present(b.mean_reward)) continue;
        const key = `${unit.key}\u0000${b.level}\u0000${b.window_start}`;
        const cell = cells.get(key) || { key: unit.key, label: unit.label, colour: unit.colour, level_name: names[b.level] || b.level,
                                         middle: (b.window_start + b.window_end) / 2, window: `epochs ${b.window_start}–${b.window_end}`, sum: 0, n: 0 };
        cell.sum += b.mean_reward;
        cell.n += 1;
        cells.set(key, cell);
      }
      const rows = [...cells.values()].map((c) => ({ ...c, mean_reward: c.sum / c.n }));
      const levels = new Set(rows.map((r) => r.level_name)).size || 1;
      return {
        title: { text: BREAKDOWN_TITLES[kind] || `Reward by ${kind}`,
                 subtitle: `mean reward over windows of ${SETTINGS.breakdown_window} epochs` + (grouped(section) ? ", the mean of each configuration's seeds" : "") },
        data: { values: rows },
        facet: { column: { field: "level_name", type: "nominal", title: null, header: { labelFontWeight: 600 } } },
        spec: {
          width: Math.max(120, Math.floor((width - 30 * levels) / levels)), height: 120,
          mark: { type: "line", point: { size: 18 }, strokeWidth: 1.6 },
          encoding: { x: { field: "middle", type: "quantitative", title: "epoch" },
                      y: { field: "mean_reward", type: "quantitative", title: "mean reward", scale: { zero: false } },
                      color: COLOUR, detail: { field: "key" },
                      tooltip: [{ field: "label", title: grouped(section) ? "configuration" : "run" }, { field: "level_name", title: kind },
                                { field: "window" }, { field: "mean_reward", title: "mean reward", format: ".3f" }] },
        },
        resolve: { scale: { y: "shared" } },
      };
    });
    return { $schema: VL_SCHEMA, config: CONFIG, vconcat: charts };
  }

  // ---- the hover box ---------------------------------------------------------------------------------------

  function hoveredX(value) {
    if (value === null || value === undefined) return null;
    if (typeof value === "number") return value;
    if (Array.isArray(value)) return hoveredX(value[0]);
    if (typeof value === "object") {
      if ("x" in value) return hoveredX(value.x);
      if (Array.isArray(value.values)) return hoveredX(value.values[0]);
    }
    return null;
  }

  /** The point of a line nearest to x (lines are in x order). */
  function nearest(points, x) {
    let lo = 0;
    let hi = points.length - 1;
    if (hi < 0) return null;
    while (hi - lo > 1) {
      const mid = (lo + hi) >> 1;
      if (points[mid].x <= x) lo = mid;
      else hi = mid;
    }
    return Math.abs(points[lo].x - x) <= Math.abs(points[hi].x - x) ? points[lo] : points[hi];
  }

  /** The main chart's lines at x, highest first: each line's point nearest to x. */
  function linesAt(section, x) {
    return (section.lines.main || []).map(({ unit, points }) => ({ unit, point: nearest(points, x) }))
      .filter(({ point }) => point).sort((a, b) => b.point.y - a.point.y);
  }

  function showReadout(section, x) {
    const box = section.readout;
    section.hoverX = x;
    if (x === null) {
      box.hidden = true;
      return;
    }
    const at = linesAt(section, x);
    const configs = grouped(section);
    const shown = at.slice(0, explorer.readoutRows);
    const head = configs
      ? ["", "configuration", "IQM", "25th–75th", "seeds"]
      : ["", "run", "smoothed", "value", "snapshot model name"];
    const rows = shown.map(({ unit, point }) => el("tr", {},
      el("td", {}, el("span", { class: "swatch", style: { background: unit.colour } })),
      el("td", { class: "label", title: unit.label }, shortLabel(unit.label)),
      el("td", { class: "n" }, general(point.y)),
      configs ? el("td", { class: "n" }, point.n > 1 ? `${general(point.lo)} – ${general(point.hi)}` : "–")
              : el("td", { class: "n" }, general(point.raw)),
      configs ? el("td", { class: "n" }, point.n) : el("td", {}, el("code", {}, modelName(point.snapshot)))));
    if (at.length > shown.length) rows.push(el("tr", { class: "more" }, el("td", {}), el("td", { colspan: 4 }, `${at.length - shown.length} more`)));
    const epochs = [...new Set(shown.map(({ point }) => point.epoch))];
    const where = section.state.x === "epoch" ? `epoch ${Math.round(x)}`
      : `${Math.round(x).toLocaleString("en")} trajectories` + (epochs.length === 1 ? ` (epoch ${epochs[0]})` : "");
    box.replaceChildren(
      el("div", { class: "epoch" }, where, el("span", { class: "sub" }, ` · ${metricTitle(section.state.metric)} · click: its trajectories`)),
      el("table", {}, el("thead", {}, el("tr", {}, head.map((h, i) => el("th", { class: i >= 2 && i < 5 && !(i === 4 && !configs) ? "n" : null }, h)))),
         el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: 5 }, "no line drawn has this point")))));
    box.hidden = false;
    placeReadout(section);
  }

  /** The hover box at x, as its rows read (the tests' way to it without a pointer). */
  explorer.readoutAt = (index, x) => {
    const section = explorer.sections[index];
    showReadout(section, x);
    return [...section.readout.querySelectorAll("tbody tr")].map((tr) => tr.textContent.trim());
  };

  function modelName(snapshotId) {
    return snapshotId === null || snapshotId === undefined ? "–" : SETTINGS.snapshot_model_prefix + snapshotId;
  }

  /** Beside the pointer, inside the chart: flipped to the pointer's left or moved up where it would leave it. */
  function placeReadout(section) {
    const box = section.readout;
    const pointer = section.pointer;
    if (box.hidden || !pointer) return;
    const host = box.parentElement.getBoundingClientRect();
    const left = pointer.clientX - host.left;
    const top = pointer.clientY - host.top;
    const room = host.width - left - 24;
    const x = room > box.offsetWidth ? left + 18 : left - box.offsetWidth - 18;
    box.style.left = `${Math.max(0, Math.min(x, host.width - box.offsetWidth))}px`;
    box.style.top = `${Math.max(0, Math.min(top + 14, host.height - box.offsetHeight))}px`;
  }

  // ---- histograms of an epoch's trajectories ---------------------------------------------------------------

  /** The histogram epoch of a run nearest to epoch (the page keeps every k-th epoch's). */
  function histogramEpoch(section, runId, epoch) {
    const h = (section.ablation.histograms || {})[runId];
    if (!h || !h.epoch.length) return null;
    return h.epoch.reduce((best, e) => (Math.abs(e - epoch) < Math.abs(best - epoch) ? e : best), h.epoch[0]);
  }

  function histogramRows(section, runId, epoch) {
    const h = section.ablation.histograms[runId];
    const rows = [];
    for (const quantity of ["reward", "advantage"]) {
      const q = h[quantity];
      if (!q) continue;
      const i = q.epoch.indexOf(epoch);
      if (i < 0) continue;
      // bins of equal width from lo to hi; an epoch whose values are all equal has one bin, drawn a unit wide
      const single = !(q.hi[i] > q.lo[i]);
      const width = single ? 1 : (q.hi[i] - q.lo[i]) / section.bins;
      q.bin[i].forEach((bin, j) => {
        rows.push({ quantity, start: single ? q.lo[i] - 0.5 : q.lo[i] + bin * width,
                    end: single ? q.lo[i] + 0.5 : q.lo[i] + (bin + 1) * width, n: q.n[i][j] });
      });
    }
    return rows;
  }

  async function showHistogram(section, runId, epoch) {
    const node = section.nodes.histogram;
    const runs = visibleRuns(section).filter((r) => (section.ablation.histograms || {})[r.run_id]);
    if (!runs.length) {
      node.replaceChildren(el("p", { class: "note" }, "No trajectory histograms on this page for the runs shown."));
      return;
    }
    const run = runs.find((r) => r.run_id === runId) || runs[0];
    const kept = histogramEpoch(section, run.run_id, epoch);
    const rows = histogramRows(section, run.run_id, kept);
    section.histogram = { run_id: run.run_id, epoch: kept, rows };
    const select = el("select", { "aria-label": "run of the histogram" },
      runs.map((r) => el("option", { value: r.run_id, selected: r.run_id === run.run_id }, shortLabel(r.label, 60))));
    select.addEventListener("change", () => showHistogram(section, select.value, epoch));
    const chart = el("div", { class: "histogram-chart" });
    node.replaceChildren(
      el("h3", {}, `Trajectories at epoch ${kept}`),
      el("div", { class: "controls" }, el("label", {}, "run ", select),
         el("span", { class: "note" }, kept === epoch ? "" : `(epoch ${epoch} has no histogram on this page; the nearest kept epoch is shown)`)),
      chart);
    const spec = {
      $schema: VL_SCHEMA, config: CONFIG, data: { values: rows },
      facet: { column: { field: "quantity", type: "nominal", title: null, sort: ["reward", "advantage"] } },
      spec: { width: 260, height: 110, mark: { type: "bar", color: run.colour, binSpacing: 1 },
              encoding: { x: { field: "start", type: "quantitative", bin: { binned: true }, title: null },
                          x2: { field: "end" }, y: { field: "n", type: "quantitative", title: "trajectories" },
                          tooltip: [{ field: "start", format: ".3f" }, { field: "end", format: ".3f" }, { field: "n", title: "trajectories" }] } },
      resolve: { scale: { x: "independent" } },
    };
    section.views.histogram = (await vegaEmbed(chart, spec, EMBED)).view;
  }

  // ---- the transcripts behind the rewards ------------------------------------------------------------------

  /** One listed trajectory: its reward and epoch, its id, a link to its transcript's file, the transcript's first line. */
  function transcriptEntry(entry) {
    const file = entry.href.startsWith("file:") ? el("a", { href: entry.href, title: entry.path }, entry.path)
      : el("span", { title: entry.href }, entry.path);
    return el("li", {},
      el("div", {}, el("strong", {}, num(entry.reward)), ` · epoch ${entry.epoch} · `, el("code", {}, entry.trajectory_id), " · ",
         file, entry.line == null ? null : ` line ${entry.line}`),
      el("div", { class: "first-line" }, entry.first_line ?? "(not readable: the file changed since the build)"));
  }

  /** The highest- and lowest-reward trajectories of a run's matched window or of one of its epochs, as the page
   * holds them (transcript_lists.py), with a run and a scope to choose. */
  function transcriptsPanel(section) {
    const lists = section.ablation.transcripts || {};
    const runs = section.ablation.runs.filter((r) => lists[r.run_id]);
    if (!runs.length) return null;
    const node = el("div", { class: "transcripts" });
    const show = (runId, scope) => {
      const run = lists[runId];
      const epochs = Object.keys(run.epochs).map(Number).sort((a, b) => a - b);
      const shown = scope === "matched" ? run.matched : run.epochs[scope];
      const scopes = [["matched", "matched window"], ...epochs.map((e) => [String(e), `epoch ${e}`])];
      const column = (title, entries) => el("div", {}, el("h4", {}, title),
        entries.length ? el("ol", {}, entries.map(transcriptEntry)) : el("p", { class: "note" }, "none"));
      node.replaceChildren(
        el("h3", {}, "Transcripts behind the rewards"),
        el("div", { class: "controls" },
           el("label", {}, "run ", select(runs.map((r) => [r.run_id, shortLabel(r.label, 60)]), runId, "run of the transcripts", (v) => show(v, "matched"))),
           el("label", {}, "of ", select(scopes, scope, "epochs of the transcripts", (v) => show(runId, v))),
           el("span", { class: "note" }, "grpo-warehouse show <id> prints a whole transcript")),
        el("div", { class: "transcript-lists" }, column("highest reward", shown.top), column("lowest reward", shown.bottom)));
      section.transcripts = { run_id: runId, scope };
    };
    show(runs[0].run_id, "matched");
    return node;
  }

  // ---- drawing and state -----------------------------------------------------------------------------------

  // Vega warns of an "infinite extent" whenever a layer's data is empty: expected, so only errors reach the console.
  const EMBED = { actions: false, renderer: "svg", tooltip: { theme: "light" }, logLevel: 1 };

  /** The curves' width: the room the forest leaves (measured once: reading a layout costs one). */
  function chartWidth(section) {
    if (section.width === null) {
      const forest = section.ablation.overlay ? 0 : 330;
      section.width = { curves: Math.max(360, section.nodes.charts.clientWidth - forest - 24 - 90),
                        breakdowns: section.nodes.charts.clientWidth - 120 };
    }
    return section.width.curves;
  }

  const UNCHANGING = ["strips", "matched", "horizons"];
  const sameRows = (a, b) => Boolean(a) && a.length === b.length
    && a.every((row, i) => Object.keys(row).every((key) => row[key] === b[i][key]));

  /** Draws the curves again from scratch: what changes the spec (metric, x axis, scale, panels). */
  async function drawCurves(section) {
    section.panels = panelsOf(section);
    const { datasets, lines } = chartData(section);
    section.lines = lines;
    section.drawn = { ...datasets };
    if (section.views.curves) section.views.curves.finalize();
    const curves = await vegaEmbed(section.nodes.curves, curvesSpec(section, chartWidth(section), datasets), EMBED);
    section.views.curves = curves.view;
    curves.view.addSignalListener("hover", (_, value) => showReadout(section, hoveredX(value)));
  }

  /** New rows for the drawn charts: what changes only the data (smoothing, runs shown, grouping). */
  async function refresh(section, redrawSide = true) {
    const view = section.views.curves;
    if (!view) return;
    const { datasets, lines } = chartData(section);
    section.lines = lines;
    for (const [name, rows] of Object.entries(datasets)) {
      const drawn = section.drawn[name];
      // the hover strips and the matched marks rarely change: a new copy of them costs thousands of SVG elements
      if (UNCHANGING.includes(name) && sameRows(drawn, rows)) continue;
      if (drawn && drawn.length === rows.length && rows.every((row, i) => row.key === drawn[i].key && row.x === drawn[i].x)) {
        // the same points with new values (a smoothing change): Vega's tuples are changed in place, not replaced
        const fields = "y" in (rows[0] || {}) ? ["y"] : ["lo", "hi"];
        rows.forEach((row, i) => { for (const f of fields) drawn[i][f] = row[f]; });
        const change = view.changeset();
        for (const f of fields) change.modify(() => true, f, (tuple) => tuple[f]);
        view.change(name, change);
        continue;
      }
      section.drawn[name] = rows;
      view.data(name, rows);
    }
    await view.runAsync();
    if (redrawSide) await drawSide(section);
    if (!section.readout.hidden) showReadout(section, section.hoverX);
  }

  async function drawSide(section) {
    if (section.ablation.overlay) return;
    const forest = forestSpec(section, 150);
    if (section.views.forest) section.views.forest.finalize();
    section.views.forest = (await vegaEmbed(section.nodes.forest, forest, EMBED)).view;
    chartWidth(section);
    const breakdowns = breakdownSpec(section, section.width.breakdowns);
    if (section.views.breakdowns) section.views.breakdowns.finalize();
    if (breakdowns) section.views.breakdowns = (await vegaEmbed(section.nodes.breakdowns, breakdowns, EMBED)).view;
  }

  /** Draws a section: its curves, then (without waiting) the forest and breakdowns beside and below them. */
  async function drawSection(section) {
    await drawCurves(section);
    section.side = drawSide(section);
    section.nodes.curves.addEventListener("pointermove", (event) => { section.pointer = event; placeReadout(section); });
    section.nodes.curves.addEventListener("pointerleave", () => showReadout(section, null));
    section.nodes.curves.addEventListener("click", () => {
      const at = section.hoverX === null ? [] : linesAt(section, section.hoverX);
      if (at.length) {
        const top = at[0];
        showHistogram(section, top.unit.run ? top.unit.run.run_id : top.unit.runs[0].run_id, top.point.epoch);
      }
    });
  }

  async function setWeight(weight) {
    explorer.weight = weight;
    for (const section of explorer.sections) if (section.views.curves) await refresh(section, false);
  }

  /** Draws a section once (the first time it nears the screen: a page of several draws only what is seen). */
  function ensureDrawn(section) {
    if (!section.drawing) section.drawing = drawSection(section);
    return section.drawing;
  }
  explorer.drawAll = async () => {
    await Promise.all(explorer.sections.map(ensureDrawn));
    await Promise.all(explorer.sections.map((section) => section.side));
  };
  explorer.setWeight = setWeight;

  // A change of these draws the curves' spec again (their axes and titles say them); others only change rows.
  const RESPEC = ["metric", "x", "log", "grouped", "seeds"];

  /** Applies a change of the section's state (explorer.update in the console and the tests). */
  async function update(section, change) {
    Object.assign(section.state, change);
    syncTable(section);
    await section.side; // the first drawing of the side charts, if still going
    if (!section.views.curves) {
      await ensureDrawn(section);
    } else if (RESPEC.some((key) => key in change)) {
      await drawCurves(section);
      await drawSide(section);
    } else {
      await refresh(section);
    }
  }
  explorer.update = (index, change) => update(explorer.sections[index], change);

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
    await update(section, {});
  }
  explorer.toggleRun = (sectionIndex, runId, only = false) => toggleRun(explorer.sections[sectionIndex], runId, only);

  // ---- downloads -------------------------------------------------------------------------------------------

  /** A CSV cell (RFC 4180): quoted when it holds a separator, a quote or a line break; values as they are, as the
   * warehouse's CSV exports keep them. */
  function csvCell(value) {
    if (value === null || value === undefined) return "";
    const s = String(value);
    return /[",\n\r]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
  }

  /** The lines of the main chart as drawn: one row per line and point. */
  function visibleCsv(section) {
    const configs = grouped(section);
    const head = [configs ? "configuration" : "run_id", "label", "epoch", section.state.x === "epoch" ? null : "trajectories",
                  "metric", "smoothed", configs ? "iqm_of_seeds" : "value", configs ? "q25" : null, configs ? "q75" : null,
                  configs ? "seeds" : null, "ema_weight"].filter((h) => h !== null);
    const lines = [head.join(",")];
    for (const { unit, metric, points } of section.lines.main || []) {
      for (const p of points) {
        const cells = [csvCell(unit.key), csvCell(unit.label), p.epoch];
        if (section.state.x !== "epoch") cells.push(p.x);
        cells.push(csvCell(metric), p.y);
        if (configs) cells.push(p.y, p.lo, p.hi, p.n);
        else cells.push(csvCell(p.raw));
        cells.push(explorer.weight);
        lines.push(cells.join(","));
      }
    }
    return lines.join("\n") + "\n";
  }
  explorer.visibleCsv = (index) => visibleCsv(explorer.sections[index]);

  function save(url, name) {
    const link = el("a", { href: url, download: name, style: { display: "none" } });
    document.body.append(link);
    link.click();
    link.remove();
  }

  function fileName(section, ext) {
    const base = String(section.ablation.name ?? (section.ablation.overlay ? "all-runs" : "unassigned"));
    return `${base.replace(/[^A-Za-z0-9._-]+/g, "_")}-${section.state.metric}.${ext}`;
  }

  async function download(section, kind) {
    if (kind === "csv") {
      save(URL.createObjectURL(new Blob([visibleCsv(section)], { type: "text/csv" })), fileName(section, "csv"));
    } else {
      save(await section.views.curves.toImageURL(kind, kind === "png" ? 2 : 1), fileName(section, kind));
    }
  }
  // the SVG's text, or the PNG's data URL (what the download buttons save)
  explorer.image = (index, kind) => {
    const view = explorer.sections[index].views.curves;
    return kind === "svg" ? view.toSVG() : view.toImageURL(kind);
  };

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

  const RUN_COLUMNS = [
    { key: "label", title: "run", text: true },
    { key: "configuration", title: "configuration", text: true, configs: true },
    { key: "n_epochs", title: "epochs" },
    { key: "final_reward", title: "final reward" },
    { key: "peak_reward_ema", title: "peak EMA (epoch)" },
    { key: "matched_reward", title: "matched reward" },
    { key: "matched_ci_low", title: "interval", optional: true },
    { key: "matched_iqm", title: "IQM", optional: true, hint: "interquartile mean of the matched window" },
    { key: "matched_effective_n", title: "effective n", optional: true, hint: "effective sample size of the matched window" },
  ];

  function runValue(section, run, key) {
    if (key === "configuration") return (configurationOf(section, run) || { label: "" }).label;
    return run[key];
  }

  function runCells(section, run, columns) {
    const cells = {
      label: el("td", {}, el("div", { class: "label" }, run.label), run.label === run.run_id ? null : el("div", { class: "id" }, run.run_id)),
      configuration: el("td", {}, runValue(section, run, "configuration")),
      n_epochs: el("td", { class: "n" }, present(run.n_epochs) ? `${run.n_epochs} (${run.first_epoch}–${run.last_epoch})` : "–",
                   present(run.missing_epochs) && run.missing_epochs > 0 ? el("div", { class: "id" }, `${run.missing_epochs} missing`) : null),
      final_reward: el("td", { class: "n" }, num(run.final_reward)),
      peak_reward_ema: el("td", { class: "n" }, `${num(run.peak_reward_ema)} (${present(run.peak_epoch) ? run.peak_epoch : "–"})`),
      matched_reward: el("td", { class: "n" }, num(run.matched_reward)),
      matched_ci_low: el("td", { class: "n" }, interval(run.matched_ci_low, run.matched_ci_high)),
      matched_iqm: el("td", { class: "n" }, num(run.matched_iqm)),
      matched_effective_n: el("td", { class: "n" }, num(run.matched_effective_n, 1)),
    };
    return columns.map((c) => cells[c.key]);
  }

  function runsTable(section) {
    const { ablation } = section;
    const columns = RUN_COLUMNS.filter((c) => (!c.optional || ablation.runs.some((r) => c.key in r)) && (!c.configs || section.configs.size));
    const head = el("tr", {}, el("th", {}, ""), columns.map((c) => {
      const title = c.key === "configuration" && ablation.overlay ? "ablation" : c.title;
      const th = el("th", { class: c.text ? "sortable" : "n sortable", title: c.hint || "click: sort", "data-sort": c.key }, title);
      th.addEventListener("click", () => sortBy(section, c.key));
      return th;
    }));
    const rows = ablation.runs.map((run) => {
      const row = el("tr", { class: "run", "data-run": run.run_id, tabindex: 0, title: "click: hide/show · shift-click: this run only" },
        el("td", {}, el("span", { class: "swatch", style: { background: run.colour } })), runCells(section, run, columns));
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
    section.nodes.runsBody = el("tbody", {}, rows);
    return el("table", { class: "runs" }, el("thead", {}, head), section.nodes.runsBody);
  }

  function sortBy(section, key) {
    const current = section.state.sort;
    const descending = current && current.key === key ? !current.descending : !["label", "configuration"].includes(key);
    section.state.sort = { key, descending };
    syncTable(section);
  }

  /** The runs table as the state says: sorted, the filtered-out rows gone, the hidden ones struck through. */
  function syncTable(section) {
    const { sort } = section.state;
    let runs = [...section.ablation.runs];
    if (sort) {
      const sign = sort.descending ? -1 : 1;
      runs.sort((a, b) => {
        const va = runValue(section, a, sort.key);
        const vb = runValue(section, b, sort.key);
        if (va === vb) return 0;
        if (va === null || va === undefined) return 1;
        if (vb === null || vb === undefined) return -1;
        return (typeof va === "string" ? va.localeCompare(vb) : va - vb) * sign;
      });
    }
    const shown = new Set(visibleRuns(section).map((r) => r.run_id));
    for (const run of runs) {
      const row = section.runRows[run.run_id];
      row.hidden = !matchesFilter(section, run) || (section.state.only !== null && run.arm !== section.state.only);
      row.classList.toggle("off", !shown.has(run.run_id) && !row.hidden);
      section.nodes.runsBody.append(row);
    }
    for (const th of section.node.querySelectorAll("th[data-sort]")) {
      th.classList.toggle("sorted", Boolean(sort && th.dataset.sort === sort.key));
      th.dataset.order = sort && th.dataset.sort === sort.key ? (sort.descending ? "↓" : "↑") : "";
    }
    if (section.nodes.count) {
      section.nodes.count.textContent = `${shown.size} of ${plural(section.ablation.runs.length, "run")} drawn`;
    }
  }

  /** A contrast's side: a configuration's name for a row of arms of seeds, else a run's label with its colour. */
  function sideName(section, row, side) {
    const id = row[`run_${side}`];
    const config = row.unit === "runs" ? section.configs.get(row[`arm_${side}`] ?? id) : null;
    if (config) return el("span", { class: "run-name", title: config.arm }, el("span", { class: "swatch", style: { background: config.colour } }), config.label);
    const run = section.ablation.runs.find((r) => r.run_id === id);
    if (!run) return el("span", { class: "run-name" }, id);
    return el("span", { class: "run-name", title: id }, el("span", { class: "swatch", style: { background: run.colour } }), run.label);
  }

  /** Whether a contrast is resolved: the Holm-adjusted word when the warehouse gives one, else its plain one; null
   * when its tables do not say or the claim cannot be made. */
  const resolvedOf = (row) => {
    if (row.resolved_holm !== undefined) return row.resolved_holm;
    return row.resolved === undefined ? null : row.resolved;
  };
  const reasonOf = (row) => row.resolved_reason ?? row.claim_note ?? null;

  function contrastsTable(section) {
    const { ablation } = section;
    const rows = ablation.contrasts;
    if (!rows.length) {
      return el("p", { class: "note" }, section.configs.size === 1 ? "One configuration: nothing to compare."
                                                                   : "No pair to compare in this ablation.");
    }
    const has = (column) => rows.some((r) => r[column] !== undefined && r[column] !== null);
    const holm = has("resolved_holm");
    const head = el("tr", {}, el("th", {}, "A"), el("th", {}, "B"), el("th", { class: "n" }, "Δ matched reward (B − A)"),
                    el("th", { class: "n" }, `${level} interval`), has("ci_method") ? el("th", {}, "method") : null,
                    has("unit") ? el("th", {}, "unit") : null, el("th", { class: "n" }, "P(B > A)"),
                    el("th", {}, holm ? "resolved (Holm)" : "resolved"));
    const body = rows.map((r) => {
      const resolved = resolvedOf(r);
      const reason = reasonOf(r);
      const verdict = resolved === null ? (reason || "–") : resolved ? `yes: ${r.delta > 0 ? "B" : "A"} ahead` : "no";
      return el("tr", {},
        el("td", {}, sideName(section, r, "a")), el("td", {}, sideName(section, r, "b")),
        el("td", { class: "n" }, signed(r.delta)), el("td", { class: "n" }, interval(r.ci_low, r.ci_high)),
        has("ci_method") ? el("td", {}, r.ci_method ?? "–") : null, has("unit") ? el("td", {}, r.unit ?? "–") : null,
        el("td", { class: "n" }, num(r.prob_improvement)),
        el("td", { class: resolved ? "yes" : "no", title: reason || null }, verdict));
    });
    const more = ablation.n_contrasts > rows.length
      ? ` Showing ${rows.length} of ${ablation.n_contrasts.toLocaleString("en")} rows (the leader's first, then the largest differences); all are in ablation_contrasts.csv.`
      : "";
    const note = has("resolved")
      ? "Resolved: an interval that allows for autocorrelated epochs excludes zero" + (holm ? ", Holm-adjusted over the ablation's pairs" : "")
        + "; no claim: the method cannot hold its level here, for the reason shown. Unit: epochs of one run, an interval for "
        + "the difference of these two runs' expected window means (were the same runs replayed), not of their "
        + "configurations" + (rows.some((r) => r.ci_method === "structural")
          ? ", assuming (structural) their paired difference is a random walk from the runs' start plus stationary "
            + "drift and noise" : "")
        + "; runs, for the difference of the configurations' mean matched rewards over seeds, the seeds taken as "
        + "independent draws."
      : "These intervals resample epochs as if independent; per-epoch rewards are autocorrelated, so they are too narrow to resolve anything.";
    return el("div", {}, el("table", { class: "data" }, el("thead", {}, head), el("tbody", {}, body)),
              el("p", { class: "note" }, `Δ and P(B > A) compare the matched windows. ${note}${more}`));
  }

  function snapshotsTable(section) {
    const { ablation } = section;
    if (!ablation.snapshots.length) return el("p", { class: "note" }, "No snapshots.");
    const body = ablation.snapshots.map((s) => el("tr", {},
      el("td", {}, sideName(section, { run_a: s.run_id }, "a")), el("td", {}, s.role), el("td", { class: "n" }, present(s.epoch) ? s.epoch : "–"),
      el("td", { class: "model" }, s.model_name ? [el("code", { class: "model" }, s.model_name), " ", copyButton(s.model_name)] : "–")));
    return el("table", { class: "data" },
      el("thead", {}, el("tr", {}, el("th", {}, "run"), el("th", {}, "role"), el("th", { class: "n" }, "epoch"),
                          el("th", {}, "model name (call it by this)"))),
      el("tbody", {}, body));
  }

  function atHorizon(ablation) {
    const horizons = horizonsOf(ablation);
    return horizons.length === 1 ? `epoch ${horizons[0]}` : "the compute-matched horizon";
  }

  /** The claim of the leader's contrast with the runner-up, turned to leader − runner-up. */
  function claim(row, leaderId, about) {
    if (!row || !present(row.ci_low) || !present(row.ci_high)) return ".";
    const flip = row.run_a === leaderId || row.arm_a === leaderId;
    const lo = flip ? -row.ci_high : row.ci_low;
    const hi = flip ? -row.ci_low : row.ci_high;
    const resolved = resolvedOf(row);
    let text = `: Δ ${signed(flip ? -row.delta : row.delta)}, ${level} interval ${interval(lo, hi)}`;
    if (row.ci_method === "iid") return text + ", which treats autocorrelated epochs as independent: too narrow to resolve anything.";
    if (resolved === null) return text + (reasonOf(row) ? `: no claim (${reasonOf(row)}).` : ".");
    if (resolved) return text + `: resolved, ${about}.`;
    return text + ", which includes zero: not resolved.";
  }

  function configurationHeadline(ablation, configs) {
    const n = ablation.n_runs ?? ablation.runs.length;
    if (configs.length === 1) {
      return `All ${plural(n, "run")} are seeds of one configuration (${configs[0].label}): there is nothing to compare it with.`;
    }
    const scored = configs.filter((c) => present(c.value)).sort((a, b) => b.value - a.value);
    if (scored.length < 2) return "The configurations have no matched rewards to compare yet.";
    const [best, second] = scored;
    const row = ablation.contrasts.find((c) => c.unit === "runs" && [c.arm_a ?? c.run_a, c.arm_b ?? c.run_b].includes(best.arm)
                                               && [c.arm_a ?? c.run_a, c.arm_b ?? c.run_b].includes(second.arm));
    return `At ${atHorizon(ablation)}, the configuration ${best.label} leads: IQM of its ${plural(best.n_runs, "seed")}' matched `
      + `rewards ${num(best.value)}, against ${num(second.value)} for ${second.label} (${plural(second.n_runs, "seed")})`
      + claim(row, best.arm, "for the configurations");
  }

  function headline(ablation) {
    const configs = ablation.configurations || [];
    if (configs.length) return configurationHeadline(ablation, configs);
    const scored = ablation.runs.filter((r) => present(r.matched_reward)).sort((a, b) => b.matched_reward - a.matched_reward);
    if (!scored.length) return "No run has a matched reward yet.";
    const [best, second] = scored;
    if (!second) return `${best.label}: matched reward ${num(best.matched_reward)} at ${atHorizon(ablation)}; there is nothing to compare it with.`;
    const row = ablation.contrasts.find((c) => (c.run_a === best.run_id && c.run_b === second.run_id)
                                            || (c.run_a === second.run_id && c.run_b === best.run_id));
    return `At ${atHorizon(ablation)}, ${best.label} leads with a matched reward of ${num(best.matched_reward)}, `
      + `against ${num(second.matched_reward)} for ${second.label}` + claim(row, best.run_id, "for these two runs");
  }

  function select(options, value, label, onChange) {
    const node = el("select", { "aria-label": label }, options.map(([v, text]) => el("option", { value: v, selected: v === value }, text)));
    node.addEventListener("change", () => onChange(node.value));
    return node;
  }

  function checkbox(checked, text, onChange, attrs = {}) {
    const box = el("input", { type: "checkbox", checked, ...attrs });
    box.addEventListener("change", () => onChange(box.checked));
    return el("label", { class: "check" }, box, text);
  }

  /** The chart's controls: metric, x axis, log scale, grouping, seeds, one configuration, downloads. */
  function chartControls(section) {
    const { ablation, state } = section;
    const configs = [...section.configs.values()];
    const grouping = section.ablation.overlay ? "group by ablation" : "group by configuration";
    const hasTrajectories = Object.values(ablation.series).some((s) => s.trajectories);
    return el("div", { class: "controls" },
      el("label", {}, "plot ", select(ablation.metrics.map((m) => [m, m]), state.metric, "metric",
                                      (metric) => update(section, { metric }))),
      el("label", {}, "x ", select([["epoch", "epoch"], ...(hasTrajectories ? [["trajectories", "trajectories seen"]] : [])],
                                   state.x, "x axis", (x) => update(section, { x }))),
      checkbox(state.log, "log y", (log) => update(section, { log }), { "aria-label": "log y axis" }),
      configs.length ? checkbox(state.grouped, grouping, (g) => update(section, { grouped: g }), { "aria-label": grouping }) : null,
      configs.length ? checkbox(state.seeds, ablation.overlay ? "runs" : "seeds", (seeds) => update(section, { seeds }),
                                { "aria-label": "show seeds" }) : null,
      configs.length > 1 ? el("label", {}, "show ", select([["", section.ablation.overlay ? "every ablation" : "every configuration"],
                                                            ...configs.map((c) => [c.arm, shortLabel(c.label, 48)])],
                                                           "", "show one configuration", (arm) => update(section, { only: arm || null })))
                         : null,
      el("span", { class: "downloads" }, "download ",
         ...["csv", "svg", "png"].map((kind) => el("button", { type: "button", "data-download": kind,
                                                                 onclick: () => download(section, kind) }, kind.toUpperCase()))));
  }

  function tableControls(section) {
    const filter = el("input", { type: "search", placeholder: "filter runs by name, id or configuration", "aria-label": "filter runs" });
    filter.addEventListener("input", () => update(section, { filter: filter.value }));
    section.nodes.count = el("span", { class: "note" });
    const all = el("button", { type: "button", onclick: () => { section.hidden.clear(); filter.value = ""; update(section, { filter: "", only: null }); } }, "show all");
    return el("div", { class: "controls" }, filter, all, section.nodes.count);
  }

  function summaryNote(ablation) {
    const total = ablation.n_runs ?? ablation.runs.length;
    if (total <= ablation.runs.length) return null;
    const configs = ablation.configurations || [];
    const what = ablation.overlay
      ? `the best runs of each ablation in turn, ${ablation.runs.length} in all`
      : configs.length
        ? `an equal share of each configuration's seeds (${configs.filter((c) => c.runs.length).length} of ${configs.length} configurations), spread over their range of matched rewards`
        : `the ${Math.ceil(ablation.runs.length / 2)} runs with the highest matched rewards and the ${Math.floor(ablation.runs.length / 2)} with the lowest`;
    return el("p", { class: "summarised" }, `${plural(total, "run")}: this page draws ${ablation.runs.length} of them, ${what}. `
      + "Every run is in run_summary.csv and the DuckDB file; configuration lines are over the seeds drawn.");
  }

  function newSection(ablation, index) {
    const configs = new Map((ablation.configurations || []).map((c) => [c.arm, c]));
    const state = { metric: ablation.metrics.includes("mean_reward") ? "mean_reward" : ablation.metrics[0], x: "epoch",
                    log: false, grouped: configs.size > 0, seeds: false, only: null, filter: "", sort: null };
    const section = { ablation, index, configs, state, hidden: new Set(), runRows: {}, views: {}, nodes: {}, smoothed: new Map(), drawing: null, side: null,
                      lines: {}, panels: [], pointer: null, hoverX: null, histogram: null, aligned: new Map(), width: null, bins: DATA.histogram_bins || 20 };
    section.nodes.curves = el("div", { class: "curves" });
    section.nodes.forest = el("div", { class: "forest" });
    section.nodes.breakdowns = el("div", { class: "breakdowns" });
    section.nodes.histogram = el("div", { class: "histogram" },
                                 el("p", { class: "note" }, "Click a chart: the distribution of that epoch's trajectory rewards and advantages."));
    section.readout = el("div", { class: "readout", hidden: true });
    section.nodes.charts = el("div", { class: "charts" }, el("div", { class: "curves-host" }, section.nodes.curves, section.readout),
                              ablation.overlay ? null : section.nodes.forest);
    return section;
  }

  function sectionFor(ablation, index) {
    const section = newSection(ablation, index);
    const runs = ablation.n_runs ?? ablation.runs.length;
    const horizons = horizonsOf(ablation);
    const configs = section.configs.size;
    const summary = plural(runs, "run") + (configs ? ` · ${plural(configs, ablation.overlay ? "ablation" : "configuration")}` : "")
      + (horizons.length === 1 && !ablation.overlay ? ` · compute-matched at epoch ${horizons[0]}` : "");
    const title = ablation.overlay ? "All runs, every ablation overlaid" : `Ablation “${ablation.name ?? "unassigned"}”`;
    section.node = el("section", { class: "ablation", id: `ablation-${index}`, "data-index": index },
      el("h2", {}, title, el("span", { class: "sub" }, summary)),
      ablation.overlay ? null : el("p", { class: "headline" }, headline(ablation)),
      summaryNote(ablation), chartControls(section), section.nodes.charts, section.nodes.histogram, transcriptsPanel(section),
      tableControls(section), runsTable(section), section.nodes.breakdowns,
      ablation.overlay ? null : el("div", { class: "tables" },
         el("div", {}, el("h3", {}, "Contrasts at the compute-matched horizon"), contrastsTable(section)),
         el("div", {}, el("h3", {}, "Snapshots"), snapshotsTable(section))));
    syncTable(section);
    return section;
  }

  /** The all-runs view of a page of several ablations: their runs overlaid, grouped by ablation. */
  function overlayOf(ablations) {
    const metrics = [...new Set(ablations.flatMap((a) => a.metrics))];
    const configurations = ablations.map((a, i) => ({ arm: `#${i}`, label: a.name ?? "unassigned", colour: null, runs: a.runs.map((r) => r.run_id),
                                                      n_runs: a.n_runs ?? a.runs.length, value: null }));
    const palette = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"];
    configurations.forEach((c, i) => { c.colour = palette[i % palette.length]; });
    const runs = ablations.flatMap((a, i) => a.runs.map((r) => ({ ...r, arm: `#${i}`, colour: configurations[i].colour })));
    return { name: null, overlay: true, runs, configurations, metrics: METRIC_ORDER_FIRST(metrics),
             series: Object.assign({}, ...ablations.map((a) => a.series)), n_runs: runs.length, contrasts: [], snapshots: [], breakdowns: [],
             histograms: Object.assign({}, ...ablations.map((a) => a.histograms || {})) };
  }
  const METRIC_ORDER_FIRST = (metrics) => ["mean_reward", ...metrics.filter((m) => m !== "mean_reward")].filter((m) => metrics.includes(m));

  function toolbar(withControls) {
    const value = el("output", { class: "weight" }, explorer.weight.toFixed(3));
    const slider = el("input", { type: "range", min: 0, max: Math.max(MAX_WEIGHT, SETTINGS.ema_weight), step: 0.001,
                                 value: SETTINGS.ema_weight, id: "smoothing", "aria-label": "smoothing weight" });
    let pending = null;
    let running = false;
    const apply = async (weight) => {
      value.textContent = weight.toFixed(3);
      pending = weight;
      if (running) return; // the change after the one being drawn is drawn next; those between are skipped
      running = true;
      while (pending !== null) {
        const w = pending;
        pending = null;
        await setWeight(w);
      }
      running = false;
    };
    slider.addEventListener("input", () => apply(Number(slider.value)));
    const reset = el("button", { type: "button", class: "reset", title: "the warehouse's ema_weight: the line then equals reward_ema" },
                     `configured (${SETTINGS.ema_weight})`);
    reset.addEventListener("click", () => { slider.value = SETTINGS.ema_weight; apply(SETTINGS.ema_weight); });
    return el("div", { class: "toolbar" },
      el("div", { class: "brand" }, DATA.index ? el("a", { href: DATA.index }, "← all ablations") : null,
         el("strong", {}, "GRPO run explorer"), DATA.all_runs ? el("a", { href: DATA.all_runs }, "all runs overlaid →") : null),
      withControls ? el("label", { class: "smoothing", for: "smoothing" }, "Smoothing", slider, value, reset) : null,
      withControls ? el("div", { class: "hint" }, "scroll on a chart: zoom · drag: pan · double-click: reset · click: that epoch's "
        + "trajectories · click a run: hide/show · shift-click: that run only") : null);
  }

  function overview() {
    const rows = DATA.overview.map((ablation) => el("tr", {},
      el("td", { class: "model" }, el("a", { href: ablation.page }, ablation.name ?? "unassigned")),
      el("td", { class: "n" }, ablation.n_runs ?? ablation.runs.length),
      el("td", { class: "n" }, (ablation.configurations || []).length || "–"), el("td", {}, headline(ablation))));
    return el("section", { class: "ablation" },
      el("h2", {}, "Ablations", el("span", { class: "sub" }, `${DATA.overview.length}, one page each`)),
      el("table", { class: "data" },
         el("thead", {}, el("tr", {}, el("th", {}, "ablation"), el("th", { class: "n" }, "runs"), el("th", { class: "n" }, "configurations"),
                             el("th", {}, "at the compute-matched horizon"))),
         el("tbody", {}, rows)));
  }

  async function main() {
    const [library, data] = await Promise.all([inflate("explorer-library"), inflate("explorer-data")]);
    const script = document.createElement("script");
    script.textContent = library;
    document.head.append(script);
    DATA = JSON.parse(data);
    explorer.data = DATA;
    SETTINGS = DATA.settings;
    explorer.weight = SETTINGS.ema_weight;
    level = `${Math.round(100 * SETTINGS.ci_level)}%`;
    const footer = el("footer", {}, `Drawn with ${DATA.library}, inlined: this page needs no network. `
      + `Smoothing: TensorBoard's debiased EMA; at ${SETTINGS.ema_weight} it equals reward_ema. `
      + `Matched reward: mean of the last ${SETTINGS.final_window} epochs at or before the horizon. `
      + "mean_reward carries every digit; the other columns 7 significant digits (float32's precision).");
    const ablations = [...DATA.ablations];
    if (DATA.overlay) ablations.push({ ...DATA.overlay, overlay: true, contrasts: [], snapshots: [], breakdowns: [] });
    else if (ablations.length > 1) ablations.push(overlayOf(DATA.ablations));
    root.replaceChildren(toolbar(ablations.length > 0));
    if (DATA.overview) root.append(overview());
    explorer.sections = ablations.map(sectionFor);
    for (const section of explorer.sections) root.append(section.node);
    if (!ablations.length && !DATA.overview) root.append(el("p", { class: "note" }, "No runs in this warehouse yet."));
    root.append(footer);
    if (explorer.sections.length) await ensureDrawn(explorer.sections[0]);
    const observer = new IntersectionObserver((entries) => {
      for (const entry of entries) {
        if (entry.isIntersecting) ensureDrawn(explorer.sections[Number(entry.target.dataset.index)]);
      }
    }, { rootMargin: "300px" });
    for (const section of explorer.sections) observer.observe(section.node);
    return true;
  }

  explorer.ready = main().catch((error) => {
    explorer.errors.push(String((error && error.stack) || error));
    root.append(el("pre", { class: "error" }, `The explorer could not draw: ${error}`));
    throw error;
  });
})();

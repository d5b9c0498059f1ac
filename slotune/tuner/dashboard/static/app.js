/* slotune dashboard: reads the REST API (/api/v1) and renders the two pages.
 *
 * Numbers are shown with fixed decimals (objective/goodput/capacity: 3, latencies in ms: 1)
 * and every cell that shows one carries the API's exact value in data-value, so a reader
 * (or the browser test) can compare the page with the JSON.
 */
(function (global) {
  "use strict";
  var API = "/api/v1";
  var FINISHED = ["done", "failed", "cancelled"];
  var POLL_MS = 3000;

  function el(tag, attrs) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (attrs[k] !== undefined && attrs[k] !== null) e.setAttribute(k, String(attrs[k]));
    });
    for (var i = 2; i < arguments.length; i++) {
      var c = arguments[i];
      if (c === null || c === undefined) continue;
      (Array.isArray(c) ? c : [c]).forEach(function (x) {
        e.appendChild(typeof x === "string" ? document.createTextNode(x) : x);
      });
    }
    return e;
  }
  function fmt(x, digits) {
    return (typeof x === "number" && isFinite(x)) ? x.toFixed(digits) : "—";
  }
  /* A numeric cell: fixed decimals shown, the exact API value in data-value. */
  function numCell(x, digits, field) {
    return el("td", { "class": "num", "data-field": field,
      "data-value": typeof x === "number" ? String(x) : "" }, fmt(x, digits));
  }
  function textCell(text, field) { return el("td", { "data-field": field }, text); }
  /* A capacity with its interval, "5.924 (5.524–6.353)", as the CLI's table and the
     report show it (slotune.tuner.planning.answer.capacity_text); data-value is the capacity. */
  function capacityCell(x) {
    var text = fmt(x.capacity, 3);
    if (typeof x.capacity === "number" && typeof x.capacity_low === "number") {
      text += " (" + fmt(x.capacity_low, 3) + "–" +
        (typeof x.capacity_high === "number" ? fmt(x.capacity_high, 3) : "∞") + ")";
    }
    return el("td", { "class": "num", "data-field": "capacity",
      "data-value": typeof x.capacity === "number" ? String(x.capacity) : "",
      "data-low": typeof x.capacity_low === "number" ? String(x.capacity_low) : "",
      "data-high": typeof x.capacity_high === "number" ? String(x.capacity_high) : "" }, text);
  }
  function trialName(t) { return "trial " + t.number; }
  function badge(text) { return el("span", { "class": "badge " + text }, text); }
  function value(v) {
    if (v === null || v === undefined) return "none";
    if (typeof v === "boolean") return v ? "true" : "false";
    if (typeof v === "object") return JSON.stringify(v);
    return String(v);
  }
  /* The read token of a server that wants one (SLOTUNE_API_READ_TOKEN): given in the
   * page's fragment (#token=…, which no server sees; taken out of the address bar at
   * once) or typed into the field the page shows when the API answers 401. Kept in
   * sessionStorage (this tab, until it closes) and sent as a bearer header, never in a
   * URL. */
  var TOKEN_KEY = "slotune.readToken";
  function readToken() {
    var given = /(?:^#|&)token=([^&]*)/.exec(location.hash);
    if (given) {
      try { sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(given[1])); } catch (e) { /* private mode */ }
      history.replaceState(null, "", location.pathname + location.search);
    }
    try { return sessionStorage.getItem(TOKEN_KEY) || ""; } catch (e) { return ""; }
  }
  function askForToken(refused) {
    var form = document.getElementById("token-form");
    if (!form) {
      var field = el("input", { id: "read-token", type: "password", autocomplete: "off",
        placeholder: "SLOTUNE_API_READ_TOKEN", "aria-label": "read token" });
      form = el("form", { id: "token-form", "class": "panel token" },
        el("label", { "for": "read-token" }, "This server needs a read token to show anything: "),
        field, el("button", { type: "submit" }, "Use token"),
        el("p", { id: "token-note", "class": "muted" }, ""));
      form.addEventListener("submit", function (ev) {
        ev.preventDefault();
        try { sessionStorage.setItem(TOKEN_KEY, field.value); } catch (e) { /* private mode */ }
        location.reload();
      });
      var error = document.getElementById("error");
      error.parentNode.insertBefore(form, error.nextSibling);
    }
    document.getElementById("token-note").textContent = refused
      ? "The token this tab holds was refused; enter the server's read token."
      : "It is kept in this tab only (sessionStorage) and sent as a bearer header.";
  }
  function getJSON(path) {
    var headers = { Accept: "application/json" };
    var token = readToken();
    if (token) headers.Authorization = "Bearer " + token;
    return fetch(API + path, { headers: headers }).then(function (r) {
      if (r.status === 401) askForToken(!!token);
      if (!r.ok) throw new Error(path + ": HTTP " + r.status);
      return r.json();
    });
  }
  function sloText(slo) {
    if (typeof slo === "string") { try { slo = JSON.parse(slo); } catch (e) { return slo; } }
    var parts = [];
    ["ttft", "tpot", "itl", "e2el"].forEach(function (k) {
      if (slo && slo[k] !== null && slo[k] !== undefined) parts.push(k.toUpperCase() + " ≤ " + slo[k] + " ms");
    });
    return "p" + ((slo && slo.percentile) || 99) + " " + (parts.join(", ") || "no targets");
  }
  function duration(s) {
    if (typeof s !== "number" || !isFinite(s)) return "—";
    s = Math.round(s);
    var h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
    return (h ? h + "h " : "") + (h || m ? m + "m " : "") + sec + "s";
  }
  function replace(id, node) {
    var box = document.getElementById(id);
    box.textContent = "";
    box.appendChild(node);
  }
  function showError(err) {
    var box = document.getElementById("error");
    if (box) box.textContent = err ? String(err.message || err) : "";
  }
  function table(headers, rows) {
    return el("table", {}, el("thead", {}, el("tr", {}, headers.map(function (h) {
      return el("th", {}, h);
    }))), el("tbody", {}, rows));
  }

  // --- index: workloads and their best configs, recent sweeps ----------------------------

  function renderWorkloads(body, best) {
    var rows = [];
    var missing = {};
    (best.without_passing || []).forEach(function (m) {
      (missing[m.workload] = missing[m.workload] || []).push(m);
    });
    body.data.forEach(function (w) {
      var none = missing[w.name] || [];
      if (!w.best.length && !none.length) {
        rows.push(el("tr", { "data-workload": w.name }, textCell(w.name, "workload"),
          el("td", { colspan: 9, "class": "muted" }, "no configuration measured yet")));
      }
      w.best.forEach(function (b) {
        rows.push(el("tr", { "data-workload": w.name, "data-trial-id": b.trial_id },
          textCell(w.name, "workload"), textCell(b.model, "model"), textCell(b.gpu, "gpu"),
          textCell(sloText(b.slo), "slo"), numCell(b.objective, 3, "objective"),
          capacityCell(b), numCell(b.gpus, 0, "gpus"),
          numCell(b.capacity_per_gpu, 3, "capacity_per_gpu"),
          el("td", { "data-field": "confirmed" }, badge(b.confirmed ? "yes" : "no"),
            b.stale ? el("span", { "data-field": "stale", title: "the newest measurement ran "
              + "another engine version than " + (b.engine_version || "this one") }, " ", badge("stale"))
              : null),
          el("td", { "data-field": "vllm_command" }, el("pre", { "class": "command" }, b.vllm_command))));
        if ((b.equivalent || []).length) {
          // Configurations its interval cannot be told from; it won by the stated rule.
          rows.push(el("tr", { "data-workload": w.name, "data-equivalent-of": b.trial_id },
            el("td", { colspan: 10, "data-field": "equivalent" },
              "equivalent to " + (b.number !== null && b.number !== undefined ? "trial " + b.number : "id " + b.trial_id) +
              " (intervals per GPU overlap; picked by lossless, fewer GPUs, capacity per GPU): " +
              b.equivalent.map(function (e) {
                return "trial " + e.number + " " + fmt(e.capacity, 3) + " (" + fmt(e.capacity_low, 3) + "–" +
                  (typeof e.capacity_high === "number" ? fmt(e.capacity_high, 3) : "∞") + ")" +
                  (e.confirmed ? "" : " search reading");
              }).join("; "))));
        }
      });
      // Measured, and nothing met the SLO: no winner, a capacity problem (and the closest).
      none.forEach(function (m) {
        rows.push(el("tr", { "data-workload": w.name, "data-no-passing": "true" },
          textCell(w.name, "workload"), textCell(m.model, "model"), textCell(m.gpu, "gpu"),
          textCell(sloText(m.slo), "slo"),
          el("td", { colspan: 5, "data-field": "no_passing" }, m.reason),
          el("td", { "data-field": "closest_command" },
            el("pre", { "class": "command" }, m.closest_command))));
      });
    });
    if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: 11, "class": "muted" }, "no workloads yet")));
    replace("workloads", table(["workload", "model", "GPU", "SLO", "objective", "capacity (req/s)",
      "GPUs", "capacity per GPU", "confirmed", "vllm command"], rows));
  }

  function progressText(p) {
    p = p || {};
    return ["done", "running", "failed", "infeasible"].map(function (k) {
      return k + " " + (p[k] === undefined ? 0 : p[k]);
    }).join(" · ");
  }

  function renderSweeps(body) {
    var rows = body.data.map(function (s) {
      var p = s.progress || {};
      return el("tr", { "data-sweep-id": s.id },
        el("td", {}, el("a", { href: "/sweeps/" + s.id }, "#" + s.id + " " + s.name)),
        textCell(s.workload, "workload"), textCell(s.model + " on " + s.gpu, "target"),
        el("td", { "data-field": "status" }, badge(s.status)),
        textCell(progressText(p), "progress"), numCell(p.best_objective, 3, "best_objective"),
        textCell(s.created_at ? new Date(s.created_at).toLocaleString() : "—", "created_at"));
    });
    if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: 7, "class": "muted" }, "no sweeps yet")));
    replace("sweeps", table(["sweep", "workload", "model / GPU", "status", "progress",
      "best objective", "created"], rows));
  }

  function index() {
    function load() {
      Promise.all([getJSON("/workloads"), getJSON("/sweeps?limit=20"), getJSON("/best")]).then(function (r) {
        renderWorkloads(r[0], r[2]); renderSweeps(r[1]); showError(null);
        document.body.setAttribute("data-loaded", "true");
      }).catch(showError);
    }
    load();
    setInterval(load, 5000);
  }

  // --- one sweep: progress, curves, trials, cards ---------------------------------------

  function knobsOf(sweep, trials) {
    var names = Object.keys((sweep.space && sweep.space.knobs) || {});
    if (!names.length) {
      trials.forEach(function (t) { Object.keys(t.params).forEach(function (k) {
        if (names.indexOf(k) < 0) names.push(k);
      }); });
    }
    var ok = trials.filter(function (t) { return t.status === "ok"; });
    var varied = names.filter(function (k) {
      var seen = {};
      ok.forEach(function (t) { seen[value(t.params[k])] = true; });
      return Object.keys(seen).length > 1;
    });
    return varied.length ? varied : names;
  }

  function bestSoFar(trials) {
    // Configurations only: a confirmation repeat or a quality baseline is a boot, not one.
    var ok = trials.filter(function (t) { return t.status === "ok" && (t.role || "search") === "search"; });
    var confirmed = ok.filter(function (t) { return t.confirmed; });
    var pool = confirmed.length ? confirmed : ok;
    var best = null;
    pool.forEach(function (t) {
      if (!best || (t.objective || 0) > (best.objective || 0)) best = t;
    });
    return best;
  }

  /* The best trial as the log names it: its Optuna number (the row id only when the
     trial is not among those listed). */
  function bestName(p, trials) {
    if (p.best_trial_id === undefined || p.best_trial_id === null) return "—";
    var row = trials.filter(function (t) { return t.id === p.best_trial_id; })[0];
    return row ? trialName(row) : "id " + p.best_trial_id;
  }

  function stat(label, v, field, raw) {
    return el("div", { "class": "stat", "data-stat": field },
      el("div", { "class": "label" }, label),
      el("div", { "class": "value", "data-value": raw === undefined ? "" : String(raw) }, v));
  }

  function renderHeader(s) {
    document.title = "slotune — sweep " + s.id + " " + s.name;
    replace("title", el("span", {}, "Sweep #" + s.id + ": " + s.name + " ", badge(s.status)));
    replace("facts", el("div", {}, el("span", { "data-field": "workload" }, s.workload), " · ",
      s.model + " on " + s.gpu, " · SLO ", el("span", { "data-field": "slo" }, sloText(s.slo)),
      " · strategy " + s.strategy + " · mode " + s.mode, " · ",
      el("a", { href: API + "/sweeps/" + s.id + "/report?format=html" }, "report (HTML)"), " · ",
      el("a", { href: API + "/sweeps/" + s.id + "/report?format=md" }, "report (Markdown)")));
  }

  function renderProgress(s, trials) {
    var p = s.progress || {};
    var count = function (k) {
      return p[k] !== undefined ? p[k] : trials.filter(function (t) { return t.status === (k === "done" ? "ok" : k); }).length;
    };
    var best = p.best_objective !== undefined ? p.best_objective : null;
    var finished = FINISHED.indexOf(s.status) >= 0;
    replace("progress", el("div", {},
      el("div", { "class": "stats" },
        stat("done", String(count("done")), "done", count("done")),
        stat("running", String(count("running")), "running", count("running")),
        stat("failed", String(count("failed")), "failed", count("failed")),
        stat("infeasible", String(count("infeasible")), "infeasible", count("infeasible")),
        stat("best so far", fmt(best, 3), "best_objective", best === null ? undefined : best),
        stat("best trial", bestName(p, trials), "best_trial_id", p.best_trial_id),
        stat("ETA", finished ? "finished" : duration(p.eta_s), "eta", p.eta_s)),
      p.waiting && !finished ? el("p", { "data-field": "waiting" },
        "Waiting for " + p.waiting["for"] + " since " + p.waiting.since) : null,
      s.stop_reason ? el("p", { "data-field": "stop_reason" }, "Stopped: " + s.stop_reason) : null));
  }

  function renderWinner(s, trials) {
    var w = bestSoFar(trials);
    if (!w) { replace("winner", el("p", { "class": "muted" }, "no measured configuration yet")); return; }
    var m = w.metrics || {};
    replace("winner", el("div", { "data-trial-id": w.id },
      table(["trial", "objective", "goodput (req/s)", "capacity (req/s)", "p99 TTFT ms", "p99 TPOT ms",
        "headroom", "confirmed", "binding wall"],
        [el("tr", {}, textCell(trialName(w), "trial"),
          numCell(w.objective, 3, "objective"), numCell(m.request_goodput, 3, "request_goodput"),
          capacityCell(w), numCell(m.p99_ttft_ms, 1, "p99_ttft_ms"),
          numCell(m.p99_tpot_ms, 1, "p99_tpot_ms"), numCell(m.headroom, 3, "headroom"),
          el("td", { "data-field": "confirmed" }, badge(w.confirmed ? "yes" : "no")),
          textCell(w.diagnosis ? (w.diagnosis.label || w.diagnosis.wall) + ": " + (w.diagnosis.reason || "") : "—",
            "diagnosis"))]),
      el("pre", { "class": "command", "data-field": "vllm_command" }, vllmCommand(s.model, w.config))));
  }

  /* The same command line as slotune.workers.engines.flag_args (POSIX-quoted when needed). */
  function vllmCommand(model, config) {
    var args = ["vllm", "serve", model];
    Object.keys(config || {}).forEach(function (k) {
      var v = config[k], flag = "--" + k.replace(/_/g, "-");
      if (v === null || v === undefined) return;
      if (typeof v === "boolean") { args.push(v ? flag : "--no-" + flag.slice(2)); return; }
      args.push(flag, typeof v === "object" ? JSON.stringify(v) : String(v));
    });
    return args.map(function (a) {
      return /^[\w@%+=:,./-]+$/.test(a) ? a : "'" + a.replace(/'/g, "'\"'\"'") + "'";
    }).join(" ");
  }

  function renderCharts(s, trials) {
    var ok = trials.filter(function (t) { return t.status === "ok"; });
    var slo = s.slo || {};
    var specs = [];
    var refs = function (metric) {
      return slo[metric] ? [{ y: slo[metric], label: "SLO p" + (slo.percentile || 99) + " " +
        metric.toUpperCase() + " ≤ " + slo[metric] + " ms" }] : [];
    };
    var pts = function (knob, metric) {
      return ok.filter(function (t) { return knob in t.params && typeof t.metrics[metric] === "number"; })
        .map(function (t) { return [t.params[knob], t.metrics[metric], "trial #" + t.number]; });
    };
    knobsOf(s, trials).forEach(function (knob) {
      var goodput = pts(knob, "request_goodput");
      var best = {};
      goodput.forEach(function (p) {
        var k = value(p[0]);
        if (!best[k] || p[1] > best[k][1]) best[k] = p;
      });
      specs.push({ id: "goodput-vs-" + knob, title: "goodput vs " + knob, xLabel: knob,
        yLabel: "request goodput (req/s)", series: [{ name: "trials", points: goodput },
          { name: "best per value", points: Object.keys(best).map(function (k) { return best[k]; }),
            line: true, markers: false, color: "#111827" }] });
      ["ttft", "tpot"].forEach(function (metric) {
        specs.push({ id: "p99-" + metric + "-vs-" + knob, title: "p99 " + metric.toUpperCase() + " vs " + knob,
          xLabel: knob, yLabel: "p99 " + metric.toUpperCase() + " (ms)",
          series: [{ name: "trials", points: pts(knob, "p99_" + metric + "_ms") }], refLines: refs(metric) });
      });
    });
    ["ttft", "tpot"].forEach(function (metric) {
      var points = ok.filter(function (t) {
        return typeof t.metrics.request_throughput === "number" && typeof t.metrics["p99_" + metric + "_ms"] === "number";
      }).map(function (t) { return [t.metrics.request_throughput, t.metrics["p99_" + metric + "_ms"], "trial #" + t.number]; });
      specs.push({ id: "pareto-" + metric, title: "Pareto front: p99 " + metric.toUpperCase() + " vs throughput",
        xLabel: "request throughput (req/s)", yLabel: "p99 " + metric.toUpperCase() + " (ms)", xScale: "linear",
        series: [{ name: "trials", points: points },
          { name: "Pareto front", points: SlotuneCharts.paretoFront(points), line: true, color: "#111827" }],
        refLines: refs(metric) });
    });
    var box = el("div", { "class": "charts" });
    specs.forEach(function (spec) { box.appendChild(el("div", { "class": "chart-box" }, SlotuneCharts.render(spec))); });
    replace("charts", box);
  }

  /* The frontier of the sweep's workload on its model and GPU, under its SLO (capacity
     sweeps): GET /api/v1/workloads/NAME/frontier, drawn as the report draws it
     (slotune/tuner/report/_render.py frontier_charts), with the capacity-per-GPU grid. */
  function renderFrontier(s) {
    var section = document.getElementById("frontier");
    if (s.mode !== "capacity") {
      replace("frontier", el("p", { "class": "muted" }, "Goodput sweep: no capacity probes to draw."));
      section.setAttribute("data-state", "none");
      return;
    }
    var q = "?model=" + encodeURIComponent(s.model) + "&gpu=" + encodeURIComponent(s.gpu) +
      "&slo=" + encodeURIComponent(s.slo_key);
    fetch(API + "/workloads/" + encodeURIComponent(s.workload) + "/frontier" + q,
          { headers: { Accept: "application/json" } }).then(function (r) {
      if (r.status === 404) return null;
      if (!r.ok) throw new Error("frontier: HTTP " + r.status);
      return r.json();
    }).then(function (f) {
      if (f === null || !f.points.length) {
        replace("frontier", el("p", { "class": "muted" }, "No probes stored yet."));
        section.setAttribute("data-state", "none");
        return;
      }
      var pct = "p" + f.percentile;
      var refs = f.min_interactivity_tps === null ? [] : [{ y: f.min_interactivity_tps,
        label: "SLO " + pct + " TPOT ≤ " + f.tpot_target_ms + " ms = " +
          Number(f.min_interactivity_tps.toPrecision(3)) + " tok/s per user" }];
      var axes = [["frontier", "per GPU", "output tokens/s per GPU", "output_tps_per_gpu"]];
      if (f.price_per_gpu_hour) {
        axes.push(["frontier-dollar", "per dollar", "output tokens per US$ ($" +
          f.price_per_gpu_hour + "/GPU-h)", "tokens_per_dollar"]);
      }
      var box = el("div", { "class": "charts" });
      axes.forEach(function (a) {
        var pts = function (keep) {
          return f.points.filter(function (p) { return p.interactivity_tps !== null && keep(p); })
            .map(function (p) { return [p[a[3]], p.interactivity_tps, "trial id " + p.trial_id +
              " at " + Number(p.request_rate.toPrecision(3)) + " req/s"]; });
        };
        var series = [
          { name: "meets the SLO", points: pts(function (p) { return p.meets_slo === "pass"; }), color: "#059669" },
          { name: "breaks it", points: pts(function (p) { return p.meets_slo === "fail"; }), color: "#9ca3af" },
          { name: "cannot tell", points: pts(function (p) { return p.meets_slo === "unknown"; }), color: "#d97706" },
          { name: "Pareto frontier", points: pts(function (p) { return p.on_frontier; }), line: true,
            markers: false, color: "#111827" },
          { name: "winner", points: pts(function (p) { return p.winner; }), color: "#f59e0b", radius: 7,
            stroke: "#111827", label: "winner" }
        ].filter(function (x) { return x.points.length || x.name === "winner"; });
        box.appendChild(el("div", { "class": "chart-box" }, SlotuneCharts.render({
          id: a[0], title: "Frontier " + a[1] + ": " + f.model + " on " + f.gpu +
            ", every configuration and probed rate",
          xLabel: a[2], yLabel: "output tokens/s per user (1000 ÷ " + pct + " TPOT)", xScale: "linear",
          width: 760, height: 380, series: series, refLines: refs })));
      });
      var grid = f.capacity;
      var table = el("table", { "class": "grid", "data-field": "capacity-grid" }, [
        el("tr", {}, [el("th", {}, pct + " TTFT limit ↓ / TPOT limit →")].concat(
          grid.tpot_ms.map(function (t) { return el("th", {}, t + " ms"); })))
      ].concat(grid.ttft_ms.map(function (ttft, i) {
        return el("tr", { "data-ttft": ttft }, [el("th", {}, ttft + " ms")].concat(
          grid.per_gpu[i].map(function (v, j) {
            return el("td", { "class": "num", "data-tpot": grid.tpot_ms[j], "data-value": v === null ? "" : v },
              v === null ? "—" : Number(v.toPrecision(3)) + " (" + grid.confidence[i][j] + ")");
          })));
      })));
      replace("frontier", el("div", {}, [
        el("p", {}, "Every probe of every configuration of " + f.workload + " on " + f.gpu + " (" +
          f.points.length + " points, under " + f.slo_text + "): how fast a user's tokens arrive " +
          "against how many one GPU serves. CSV: /api/v1/workloads/" + f.workload + "/frontier?format=csv"),
        box, el("h3", {}, "Capacity per GPU (req/s) under other limits"), table]));
      section.setAttribute("data-state", "loaded");
    }).catch(function (e) {
      replace("frontier", el("p", { "class": "error" }, String(e.message || e)));
      section.setAttribute("data-state", "error");
    });
  }

  function failureText(t) {
    var m = t.metrics || {};
    return [t.failure_class, m.failure_message, m.early_abort].filter(function (x) { return x; }).join(": ");
  }

  function renderTrials(s, trials) {
    var knobs = knobsOf(s, trials);
    var rows = trials.map(function (t) {
      var m = t.metrics || {};
      return el("tr", { "data-trial-id": t.id, "data-status": t.status },
        textCell(String(t.number), "number"), textCell(String(t.attempt), "attempt"),
        el("td", { "data-field": "status" }, badge(t.status)),
        knobs.map(function (k) { return textCell(value(t.params[k]), "param:" + k); }),
        numCell(t.objective, 3, "objective"), numCell(m.request_goodput, 3, "request_goodput"),
        numCell(m.request_throughput, 3, "request_throughput"), numCell(m.p99_ttft_ms, 1, "p99_ttft_ms"),
        numCell(m.p99_tpot_ms, 1, "p99_tpot_ms"), numCell(m.headroom, 3, "headroom"),
        el("td", { "data-field": "confirmed" }, t.confirmed ? badge("yes") : ""),
        textCell(failureText(t), "failure"));
    });
    replace("trials", el("div", { "class": "table-wrap" }, table(["#", "attempt", "status"].concat(knobs)
      .concat(["objective", "goodput", "throughput", "p99 TTFT ms", "p99 TPOT ms", "headroom", "confirmed",
        "failure / reason"]), rows)));
  }

  /* A twin sweep: how much it screened and booted, its calibration, predicted against
   * measured for every real trial, and its ranking of what it never booted. */
  function renderTwin(s) {
    var t = (s.progress || {}).twin;
    if (!t) { replace("twin", el("p", { "class": "muted" }, "no twin (not a twin sweep)")); return; }
    var factors = Object.keys(t.factors || {}).map(function (k) { return k + " ×" + fmt(t.factors[k], 3); }).join(", ");
    var calls = (t.calls || []).map(function (c) {
      return el("tr", { "data-number": c.number }, textCell("#" + c.number, "number"),
        textCell(cardText(c.params), "params"),
        c.predicted_failure ? textCell(c.predicted_failure, "predicted") : numCell(c.predicted, 3, "predicted"),
        textCell("±" + Math.round(c.band * 100) + "%", "band"),
        c.measured_failure ? textCell(c.measured_failure, "measured")
          : numCell(c.measured === null ? undefined : c.measured, 3, "measured"),
        numCell(c.error === null ? undefined : c.error, 3, "error"));
    });
    var ranking = (t.ranking || []).map(function (r, i) {
      return el("tr", {}, textCell(String(i + 1), "rank"), textCell(cardText(r.params), "params"),
        r.predicted_failure ? textCell(r.predicted_failure, "predicted") : numCell(r.predicted, 3, "predicted"));
    });
    replace("twin", el("div", {},
      el("div", { "class": "stats" },
        stat("candidates", String(t.candidates), "twin_candidates", t.candidates),
        stat("screened", String(t.screened), "twin_screened", t.screened),
        stat("booted", String(t.booted), "twin_booted", t.booted),
        stat("error band", "±" + Math.round(t.band * 100) + "%", "twin_band", t.band)),
      el("p", { "data-field": "twin_calibration" }, "Calibration on " + t.gpu + ": " + factors +
        " the shipped roofline" + (t.fit ? " (fit residual " + fmt(t.fit.residual, 3) + ", " +
        t.fit.trials.length + " trials)" : " (not fitted yet)") + "; started from " +
        (t.warm_start || "the shipped calibration") + "."),
      (t.notes || []).map(function (n) { return el("p", { "class": "muted" }, n); }),
      el("h3", {}, "Predicted against measured"),
      table(["trial", "configuration", "predicted", "band", "measured", "error"], calls),
      el("h3", {}, "Never booted: the twin's ranking"),
      table(["rank", "configuration", "predicted"], ranking)));
  }

  function cardText(v) {
    if (v === null || v === undefined) return "—";
    if (typeof v === "string") return v;
    if (typeof v === "object" && !Array.isArray(v)) {
      return Object.keys(v).filter(function (k) { return v[k] !== null; }).map(function (k) {
        var x = v[k];
        if (x && typeof x === "object" && !Array.isArray(x)) {  // e.g. the knobs held fixed
          x = Object.keys(x).map(function (j) { return j + "=" + value(x[j]); }).join(", ");
        }
        return k + ": " + (typeof x === "string" ? x : value(x));
      }).join("; ");
    }
    return JSON.stringify(v);
  }

  function renderCards(cards) {
    if (!cards.length) { replace("cards", el("p", { "class": "muted" }, "no experiment cards (not a guided sweep)")); return; }
    var box = el("div", {});
    cards.forEach(function (c) {
      var result = c.result || {};
      var rb = c.rollback && typeof c.rollback === "object" ? c.rollback : null;
      var rollback = rb ? (rb.to || "") + " — configuration " + cardText(rb.config || {}) + "; check: " + (rb.check || "—")
        : cardText(c.rollback);
      // The playbook's nine fields, as a small form.
      var fields = [["symptom", c.symptom], ["evidence", cardText(c.evidence)], ["hypothesis", c.hypothesis],
        ["variable", c.variable], ["controls", cardText(c.controls)], ["values tried", c.values.map(value).join(", ")],
        ["expected direction", c.expected_direction], ["stop condition", (c.stop_condition || []).join("; ") || "—"],
        ["conclusion", (c.verdict || "pending") + (result.summary ? ": " + result.summary : "")],
        ["rollback", rollback]];
      var rows = (result.results || []).map(function (r) {
        return el("tr", { "data-value": value(r.value) }, textCell(value(r.value), "value"), textCell(r.status, "status"),
          numCell(r.objective, 3, "objective"), numCell(r.p99_ttft_ms, 1, "p99_ttft_ms"),
          numCell(r.p99_tpot_ms, 1, "p99_tpot_ms"), numCell(r.headroom, 2, "headroom"),
          textCell(r.failure || "", "failure"));
      });
      box.appendChild(el("div", { "class": "card", "data-card-step": c.step },
        el("h3", {}, "Step " + c.step + ": " + c.variable + " ", badge(c.verdict || "pending")),
        el("dl", {}, fields.map(function (f) { return [el("dt", { "data-field": f[0] }, f[0]), el("dd", {}, f[1])]; })
          .reduce(function (a, b) { return a.concat(b); }, [])),
        rows.length ? table(["value", "status", "objective", "p99 TTFT ms", "p99 TPOT ms", "headroom", "failure"], rows) : null));
    });
    replace("cards", box);
  }

  /* Every configuration the sweep searched, page by page (the API gives at most 500 at a
     time); its confirmation repeats and quality baseline are rows of their own, not
     configurations, and stay out of the curves and the best-so-far. */
  function allTrials(id) {
    var out = [];
    function page(offset) {
      return getJSON("/sweeps/" + id + "/trials?role=search&limit=500&offset=" + offset).then(function (body) {
        out = out.concat(body.data);
        return body.data.length && out.length < body.count ? page(out.length) : out;
      });
    }
    return page(0);
  }

  function sweep() {
    var match = /\/sweeps\/(\d+)/.exec(location.pathname);
    var id = match ? match[1] : new URLSearchParams(location.search).get("id");
    var timer = null;
    function load() {
      Promise.all([getJSON("/sweeps/" + id), allTrials(id),
        getJSON("/sweeps/" + id + "/cards")]).then(function (r) {
        var s = r[0], trials = r[1], cards = r[2].data;
        renderHeader(s); renderProgress(s, trials); renderWinner(s, trials);
        renderCharts(s, trials); renderFrontier(s); renderTrials(s, trials); renderTwin(s);
        renderCards(cards);
        showError(null);
        document.body.setAttribute("data-loaded", "true");
        document.body.setAttribute("data-sweep-status", s.status);
        if (FINISHED.indexOf(s.status) >= 0 && timer !== null) { clearInterval(timer); timer = null; }
      }).catch(showError);
    }
    load();
    timer = setInterval(load, POLL_MS);
  }

  global.SlotuneApp = { index: index, sweep: sweep, vllmCommand: vllmCommand, fmt: fmt };
})(window);

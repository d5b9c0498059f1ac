/* slotune dashboard charts: vanilla JS inline SVG, no dependencies (works offline).
 *
 * SlotuneCharts.render(spec) returns an <svg class="chart" data-chart="<id>"> element.
 * spec = {id, title, xLabel, yLabel, xScale: "auto"|"linear"|"log"|"category",
 *         width, height,
 *         series: [{name, points: [[x, y], ...], line, markers, color,
 *                   radius, stroke, label}],   (the last three: a point that stands out)
 *         refLines: [{y, label}]}
 * Numeric x values on a wide positive range (max/min >= 16) get a log axis, like the
 * report's Python charts (slotune/tuner/report/_svg.py); anything else (booleans, strings, null)
 * is a category. Every point is a <circle class="pt" data-x data-y> with a tooltip.
 */
(function (global) {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var DEFAULT_W = 560, DEFAULT_H = 300, ML = 64, MR = 16, MT = 30, MB = 48;
  var PALETTE = ["#2563eb", "#d97706", "#059669", "#7c3aed", "#dc2626", "#0891b2"];

  function svgEl(tag, attrs, text) {
    var e = document.createElementNS(NS, tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, String(attrs[k])); });
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function isNum(x) { return typeof x === "number" && isFinite(x); }
  function xLabel(x) {
    if (x === null || x === undefined) return "none";
    if (typeof x === "boolean") return x ? "true" : "false";
    if (typeof x === "object") return JSON.stringify(x);
    return String(x);
  }
  function tickLabel(v) {
    if (v !== 0 && (Math.abs(v) >= 1e5 || Math.abs(v) < 1e-3)) return v.toExponential(1);
    return String(Number(v.toPrecision(6)));
  }
  function niceTicks(lo, hi, count) {
    count = count || 5;
    if (hi < lo) { var t = lo; lo = hi; hi = t; }
    if (hi === lo) hi = lo + (Math.abs(lo) || 1);
    var raw = (hi - lo) / count;
    var power = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 5, 10].map(function (m) { return m * power; })
      .filter(function (s) { return s >= raw; })[0];
    var ticks = [Math.floor(lo / step + 1e-9) * step];
    while (ticks[ticks.length - 1] < hi - 1e-9 * step) ticks.push(ticks[ticks.length - 1] + step);
    return ticks.map(function (v) { return Number(v.toFixed(12)); });
  }
  function order(x) {
    if (x === null || x === undefined) return [0, 0, ""];
    if (typeof x === "boolean") return [1, x ? 1 : 0, ""];
    if (typeof x === "number") return [2, x, ""];
    return [3, 0, xLabel(x)];
  }
  function cmp(a, b) {
    var oa = order(a), ob = order(b);
    for (var i = 0; i < 3; i++) { if (oa[i] < ob[i]) return -1; if (oa[i] > ob[i]) return 1; }
    return 0;
  }

  function xAxis(xs, scale, left, right) {
    var innerL = left + 24, innerR = right - 24;
    var numeric = xs.length > 0 && xs.every(isNum);
    if (scale === "category" || !numeric) {
      var cats = [];
      xs.slice().sort(cmp).forEach(function (x) {
        var l = xLabel(x); if (cats.indexOf(l) < 0) cats.push(l);
      });
      return {
        pos: function (x) {
          var i = Math.max(0, cats.indexOf(xLabel(x)));
          return cats.length === 1 ? (innerL + innerR) / 2
            : innerL + i * (innerR - innerL) / (cats.length - 1);
        },
        ticks: function () { return cats.map(function (c) { return [c, c]; }); }
      };
    }
    var values = xs.slice().sort(function (a, b) { return a - b; })
      .filter(function (v, i, a) { return i === 0 || v !== a[i - 1]; });
    var lo = values[0], hi = values[values.length - 1];
    var log = scale === "log" || (scale !== "linear" && lo > 0 && hi / lo >= 16);
    var f = log ? Math.log10 : function (v) { return v; };
    var flo = f(lo), fhi = f(hi);
    if (!log && flo === fhi) { flo -= 1; fhi += 1; }
    return {
      pos: function (x) {
        if (fhi === flo) return (innerL + innerR) / 2;
        return innerL + (f(x) - flo) / (fhi - flo) * (innerR - innerL);
      },
      ticks: function () {
        if (scale !== "linear" && values.length <= 8) return values.map(function (v) { return [v, tickLabel(v)]; });
        if (log) {
          var out = [];
          for (var p = Math.ceil(flo - 1e-9); p <= fhi + 1e-9; p++) {
            out.push([Math.pow(10, p), tickLabel(Math.pow(10, p))]);
          }
          return out;
        }
        return niceTicks(flo, fhi).filter(function (t) { return t >= flo - 1e-9 && t <= fhi + 1e-9; })
          .map(function (t) { return [t, tickLabel(t)]; });
      }
    };
  }

  function render(spec) {
    var W = spec.width || DEFAULT_W, H = spec.height || DEFAULT_H;
    var series = spec.series || [], refs = spec.refLines || [];
    var xs = [], ys = [];
    series.forEach(function (s) {
      s.points.forEach(function (p) { xs.push(p[0]); if (isNum(p[1])) ys.push(p[1]); });
    });
    refs.forEach(function (r) { ys.push(r.y); });
    var left = ML, top = MT, right = W - MR, bottom = H - MB;
    var ax = xAxis(xs, spec.xScale || "auto", left, right);
    var yt = niceTicks(Math.min.apply(null, [0].concat(ys)), Math.max.apply(null, [0].concat(ys)) || 1);
    var ylo = yt[0], yhi = yt[yt.length - 1];
    function ypos(y) { return bottom - (y - ylo) / (yhi - ylo) * (bottom - top); }
    var svg = svgEl("svg", { "class": "chart", "data-chart": spec.id, viewBox: "0 0 " + W + " " + H,
      role: "img", "aria-label": spec.title, "font-family": "sans-serif", "font-size": 11 });
    svg.appendChild(svgEl("text", { "class": "title", x: left, y: 16, "font-size": 13,
      "font-weight": "bold" }, spec.title));
    svg.appendChild(svgEl("rect", { x: left, y: top, width: right - left, height: bottom - top,
      fill: "#fafafa", stroke: "#ccc" }));
    yt.forEach(function (t) {
      var y = ypos(t);
      svg.appendChild(svgEl("line", { x1: left, x2: right, y1: y, y2: y, stroke: "#e5e5e5" }));
      svg.appendChild(svgEl("text", { "class": "ytick", x: left - 6, y: y + 4, "text-anchor": "end" },
        tickLabel(t)));
    });
    ax.ticks().forEach(function (t) {
      var x = ax.pos(t[0]);
      svg.appendChild(svgEl("line", { x1: x, x2: x, y1: bottom, y2: bottom + 4, stroke: "#888" }));
      svg.appendChild(svgEl("text", { "class": "xtick", x: x, y: bottom + 16, "text-anchor": "middle" },
        t[1]));
    });
    svg.appendChild(svgEl("text", { "class": "xlabel", x: (left + right) / 2, y: H - 8,
      "text-anchor": "middle" }, spec.xLabel));
    svg.appendChild(svgEl("text", { "class": "ylabel", transform: "translate(14 " + (top + bottom) / 2 +
      ") rotate(-90)", "text-anchor": "middle" }, spec.yLabel));
    refs.forEach(function (r) {
      var y = ypos(r.y);
      svg.appendChild(svgEl("line", { "class": "ref", "data-y": r.y, x1: left, x2: right, y1: y, y2: y,
        stroke: "#dc2626", "stroke-dasharray": "6 4" }));
      svg.appendChild(svgEl("text", { "class": "ref-label", x: right - 4, y: y - 4, "text-anchor": "end",
        fill: "#dc2626" }, r.label));
    });
    var legendX = left + 8;
    series.forEach(function (s, i) {
      var color = s.color || PALETTE[i % PALETTE.length];
      var pts = s.points.filter(function (p) { return isNum(p[1]); });
      var g = svgEl("g", { "class": "series", "data-series": s.name });
      if (s.line && pts.length > 1) {
        var path = pts.map(function (p) { return [ax.pos(p[0]), ypos(p[1])]; })
          .sort(function (a, b) { return a[0] - b[0]; })
          .map(function (p) { return p[0].toFixed(1) + "," + p[1].toFixed(1); }).join(" ");
        g.appendChild(svgEl("polyline", { points: path, fill: "none", stroke: color, "stroke-width": 1.5 }));
      }
      if (s.markers !== false) {
        pts.forEach(function (p) {
          var r = s.radius || 3.5, cx = ax.pos(p[0]), cy = ypos(p[1]);
          var attrs = { "class": "pt", cx: cx.toFixed(1), cy: cy.toFixed(1),
            r: r, fill: color, "fill-opacity": 0.75, "data-x": xLabel(p[0]), "data-y": p[1] };
          if (s.stroke) { attrs.stroke = s.stroke; attrs["stroke-width"] = 2; }
          var c = svgEl("circle", attrs);
          c.appendChild(svgEl("title", {}, s.name + ": " + xLabel(p[0]) + " → " +
            Number(p[1].toPrecision(4)) + (p[2] ? " (" + p[2] + ")" : "")));
          g.appendChild(c);
          if (s.label) {  // beside the point, on the side with room for it
            var leftSide = cx > right - 8 * s.label.length - r;
            g.appendChild(svgEl("text", { "class": "pt-label", x: leftSide ? cx - r - 3 : cx + r + 3,
              y: cy - r - 2, "font-weight": "bold", "text-anchor": leftSide ? "end" : "start" }, s.label));
          }
        });
      }
      svg.appendChild(g);
      if (series.length > 1) {
        svg.appendChild(svgEl("rect", { x: legendX, y: top + 6, width: 10, height: 10, fill: color }));
        svg.appendChild(svgEl("text", { "class": "legend", x: legendX + 14, y: top + 15 }, s.name));
        legendX += 24 + 6.5 * s.name.length;
      }
    });
    if (!xs.length) {
      svg.appendChild(svgEl("text", { x: (left + right) / 2, y: (top + bottom) / 2,
        "text-anchor": "middle", fill: "#888" }, "no data yet"));
    }
    return svg;
  }

  /* Points no other point beats (more x AND less y), sorted by x. */
  function paretoFront(points) {
    return points.filter(function (p) {
      return !points.some(function (o) {
        return o[0] >= p[0] && o[1] <= p[1] && (o[0] !== p[0] || o[1] !== p[1]);
      });
    }).sort(function (a, b) { return a[0] - b[0]; });
  }

  global.SlotuneCharts = { render: render, niceTicks: niceTicks, paretoFront: paretoFront,
                           xLabel: xLabel, compare: cmp };
})(window);

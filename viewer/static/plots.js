// envrec view: the episode page's plots (canvas). Needs viewer.js.
// x is the episode's observation index, the same on every plot and the axis: px(x) maps it onto the canvas.
"use strict";

const COLOURS = ["#1a5fb4", "#e66100", "#26a269", "#9141ac", "#c64600", "#613583", "#2ec27e", "#865e3c"];

class Plot {
  // series: [{x, min, max, label}] (min/max per pixel column); domain: [first x, last x]; mark: x where a replay
  // diverged (null: none); discrete: {n, start, names} for a Discrete action, drawn as steps labelled with its names.
  constructor(label, series, domain, mark, width, discrete) {
    this.series = series;
    this.domain = domain;
    this.mark = mark;
    this.discrete = discrete || null;
    this.width = width;
    this.gap = this.discrete ? Math.max(3, Math.min(16, 280 / this.discrete.n)) : 0;  // px between two actions
    this.height = this.discrete ? Math.max(60, Math.round(this.discrete.n * this.gap + 20)) : 90;
    this.canvas = el("canvas", {class: "plot", width: this.width, height: this.height, "data-label": label,
                                "data-kind": this.discrete ? "steps" : "lines"});
    this.cursor = el("div", {class: "cursor"});
    this.box = el("div", {class: "plot-box"});
    this.box.append(this.canvas, this.cursor);
    this.label = label;
    if (this.discrete) this.box.append(this.levelLabels());
    this.draw();
  }
  px(x) {
    const [a, b] = this.domain;
    return 1 + (b > a ? (x - a) / (b - a) : 0) * (this.width - 2);
  }
  step(px) {
    const [a, b] = this.domain;
    return Math.max(a, Math.min(b, Math.round(a + ((px - 1) / (this.width - 2)) * (b - a))));
  }
  levelY(v) {
    // action start + i sits on row i from the bottom
    const d = this.discrete;
    return this.height - 8 - (v - d.start) * this.gap;
  }
  levelLabels() {
    // the action names beside the plot's rows, as many as fit (every k-th when the rows are close)
    const d = this.discrete, every = Math.ceil(11 / this.gap), box = el("div", {class: "ylabels"});
    for (let i = 0; i < d.n; i += every) {
      const span = el("span", {"data-action": String(d.start + i)}, d.names[i]);
      span.style.top = `${this.levelY(d.start + i) - 7}px`;
      box.append(span);
    }
    this.canvas.dataset.levelY = JSON.stringify(Array.from({length: d.n}, (_, i) => this.levelY(d.start + i)));
    return box;
  }
  range() {
    let lo = Infinity, hi = -Infinity;
    for (const s of this.series) for (let i = 0; i < s.x.length; i++) {
      if (s.min[i] !== null) lo = Math.min(lo, s.min[i]);
      if (s.max[i] !== null) hi = Math.max(hi, s.max[i]);
    }
    if (!(lo <= hi)) { lo = 0; hi = 1; }
    if (lo === hi) { lo -= 1; hi += 1; }
    return [lo, hi];
  }
  draw() {
    const ctx = this.canvas.getContext("2d");
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, this.width, this.height);
    ctx.fillStyle = "#555"; ctx.font = "11px sans-serif";
    if (this.discrete) {
      ctx.strokeStyle = "#eee";
      for (let i = 0; i < this.discrete.n; i++) {
        ctx.beginPath(); ctx.moveTo(0, this.levelY(this.discrete.start + i)); ctx.lineTo(this.width, this.levelY(this.discrete.start + i)); ctx.stroke();
      }
      ctx.textAlign = "right"; ctx.fillText(this.label, this.width - 4, 11); ctx.textAlign = "left";
      this.series.forEach((s, k) => this.drawSteps(ctx, s, COLOURS[k % COLOURS.length]));
    } else {
      const [lo, hi] = this.range(), pad = 14, y = (v) => pad + (1 - (v - lo) / (hi - lo)) * (this.height - pad - 4);
      ctx.fillText(`${this.label}   [${fmt(lo)}, ${fmt(hi)}]`, 4, 11);
      this.series.forEach((s, k) => this.drawLines(ctx, s, y, COLOURS[k % COLOURS.length]));
    }
    this.drawMark(ctx);
  }
  drawLines(ctx, s, y, colour) {
    ctx.strokeStyle = colour;
    ctx.beginPath();
    let open = false;
    for (let i = 0; i < s.x.length; i++) {
      if (s.min[i] === null || s.max[i] === null) { open = false; continue; }
      const px = this.px(s.x[i]);
      if (open) ctx.lineTo(px, y(s.min[i])); else ctx.moveTo(px, y(s.min[i]));
      ctx.lineTo(px, y(s.max[i]));
      open = true;
    }
    ctx.stroke();
  }
  drawSteps(ctx, s, colour) {
    // step-after: the action at x holds until the next x (a column of many steps spans its min..max)
    ctx.strokeStyle = colour;
    ctx.lineWidth = 2;
    ctx.beginPath();
    let last = null;
    for (let i = 0; i < s.x.length; i++) {
      if (s.min[i] === null || s.max[i] === null) { last = null; continue; }
      const px = this.px(s.x[i]);
      if (last === null) ctx.moveTo(px, this.levelY(s.min[i])); else { ctx.lineTo(px, last); ctx.lineTo(px, this.levelY(s.min[i])); }
      ctx.lineTo(px, this.levelY(s.max[i]));
      last = this.levelY(s.max[i]);
    }
    if (last !== null && s.x.length) {
      const bucket = s.bucket || 1;
      ctx.lineTo(Math.min(this.width - 1, this.px(s.x[s.x.length - 1] + bucket)), last);
    }
    ctx.stroke();
    ctx.lineWidth = 1;
  }
  drawMark(ctx) {
    if (Number.isInteger(this.mark) && this.mark >= this.domain[0] && this.mark <= this.domain[1]) {
      ctx.strokeStyle = "#c01c28";
      ctx.setLineDash([3, 3]);
      ctx.beginPath();
      ctx.moveTo(this.px(this.mark), 0);
      ctx.lineTo(this.px(this.mark), this.height);
      ctx.stroke();
      ctx.setLineDash([]);
    }
  }
  moveCursor(step) {
    const px = Math.round(this.px(step));
    this.cursor.style.left = `${px}px`;
    this.canvas.dataset.cursorX = String(px);
  }
}

class Axis {
  // The x axis under the plots, in steps (observation indices), ticks every 1, 2 or 5 x 10^k steps.
  constructor(domain, width) {
    this.plot = {domain, width, px: Plot.prototype.px};
    this.canvas = el("canvas", {class: "axis", width, height: 24});
    const [a, b] = domain, span = Math.max(1, b - a), raw = span / Math.max(1, width / 90);
    const unit = 10 ** Math.floor(Math.log10(raw)), every = [1, 2, 5, 10].map((m) => m * unit).find((m) => m >= raw) || unit;
    const ctx = this.canvas.getContext("2d"), ticks = [];
    ctx.fillStyle = "#555"; ctx.strokeStyle = "#999"; ctx.font = "11px sans-serif"; ctx.textAlign = "center";
    for (let t = Math.ceil(a / every) * every; t <= b; t += every) {
      const x = this.plot.px(t);
      ctx.beginPath(); ctx.moveTo(x, 0); ctx.lineTo(x, 5); ctx.stroke();
      ctx.fillText(String(t), Math.max(10, Math.min(width - 14, x)), 17);
      ticks.push(t);
    }
    this.canvas.dataset.ticks = ticks.join(",");
  }
}

// envrec view: the episode page (video synced with plots). Needs viewer.js.
"use strict";

class CastPlayer {
  // Plays an asciicast (text frames) with the interface the plots use: currentTime, paused, play(), pause().
  constructor(pre, text) {
    const lines = text.split("\n").filter((l) => l.trim());
    const parse = (l) => { try { return JSON.parse(l); } catch { return null; } };  // a damaged line is skipped
    this.events = lines.slice(1).map(parse).filter((e) => Array.isArray(e) && e[1] === "o" && typeof e[0] === "number" &&
                                                      typeof e[2] === "string");
    this.pre = pre;
    this.paused = true;
    this.base = 0;
    this.startedAt = 0;
    this.duration = this.events.length ? this.events[this.events.length - 1][0] + 0.001 : 0;
    this.show();
  }
  get currentTime() {
    return this.paused ? this.base : Math.min(this.duration, this.base + (performance.now() - this.startedAt) / 1000);
  }
  set currentTime(t) {
    this.base = Math.max(0, Math.min(t, this.duration));
    this.startedAt = performance.now();
    this.show();
  }
  play() { this.base = this.currentTime >= this.duration ? 0 : this.currentTime; this.startedAt = performance.now(); this.paused = false; }
  pause() { this.base = this.currentTime; this.paused = true; }
  show() {
    const t = this.currentTime;
    let i = 0;
    while (i + 1 < this.events.length && this.events[i + 1][0] <= t) i++;
    // eslint-disable-next-line no-control-regex
    this.pre.textContent = this.events.length ? this.events[i][2].replace(/\x1b\[[0-9;?]*[A-Za-z]/g, "") : "";
  }
}

class Plot {
  constructor(label, series, domain, mark) {
    this.series = series;  // [{x, min, max, label}]
    this.domain = domain;  // [first x, last x]
    this.mark = mark;  // x where the replay diverged (null: none)
    this.width = plotWidth();
    this.height = 90;
    this.canvas = el("canvas", {class: "plot", width: this.width, height: this.height, "data-label": label});
    this.cursor = el("div", {class: "cursor"});
    this.cursor.style.cssText = "position:absolute;top:0;width:1px;height:100%;background:#c01c28;pointer-events:none;left:0";
    this.box = el("div", {class: "plot-box"});
    this.box.style.cssText = "position:relative;display:inline-block";
    this.box.append(this.canvas, this.cursor);
    this.label = label;
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
  draw() {
    const ctx = this.canvas.getContext("2d");
    let lo = Infinity, hi = -Infinity;
    for (const s of this.series) for (let i = 0; i < s.x.length; i++) {
      if (s.min[i] !== null) lo = Math.min(lo, s.min[i]);
      if (s.max[i] !== null) hi = Math.max(hi, s.max[i]);
    }
    if (!(lo <= hi)) { lo = 0; hi = 1; }
    if (lo === hi) { lo -= 1; hi += 1; }
    const pad = 14, y = (v) => pad + (1 - (v - lo) / (hi - lo)) * (this.height - pad - 4);
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, this.width, this.height);
    ctx.fillStyle = "#555"; ctx.font = "11px sans-serif";
    ctx.fillText(`${this.label}   [${fmt(lo)}, ${fmt(hi)}]`, 4, 11);
    const colours = ["#1a5fb4", "#e66100", "#26a269", "#9141ac", "#c64600", "#613583", "#2ec27e", "#865e3c"];
    this.series.forEach((s, k) => {
      ctx.strokeStyle = colours[k % colours.length];
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
    });
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

function plotWidth() {
  return Math.max(300, Math.min(1200, document.documentElement.clientWidth - 60));
}

// x (and a step here) is the episode's observation index: first_step .. first_step + length, where
// first_step > 0 when the oldest parts of a long episode were evicted (or a damaged part split it).
const state = {player: null, fps: 30, plots: [], length: 0, firstStep: 0, lastStep: -1};

function params() {
  const q = new URLSearchParams(location.search);
  return {recording: q.get("recording"), episode: q.get("episode"), obs: q.get("obs"), firstStep: q.get("first_step")};
}

function stepOfPlayer() {
  // Frame f of an episode's clip shows observation f (frame 0: the reset), and x is the observation index.
  const p = state.player;
  if (!p) return null;
  const last = state.firstStep + state.length;
  return Math.max(state.firstStep, Math.min(last, Math.floor(p.currentTime * state.fps + 1e-6)));
}

function seek(step) {
  document.body.dataset.seekedTo = String(step);
  if (state.player) state.player.currentTime = (step + 0.5) / state.fps;
  setCursor(step);
}

function setCursor(step) {
  if (step === null || step === state.lastStep) return;
  state.lastStep = step;
  document.body.dataset.cursorStep = String(step);
  for (const p of state.plots) p.moveCursor(step);
}

function tick() {
  const p = state.player;
  if (p) {
    if (p instanceof CastPlayer && !p.paused) p.show();
    setCursor(stepOfPlayer());
  }
  requestAnimationFrame(tick);
}

async function showMedia(doc) {
  const clip = doc.clip;
  const media = $("#media");
  media.replaceChildren();
  if (!clip || !clip.url) {
    media.append(el("p", {class: "muted"}, "no clip of this episode: plots only"));
    if (doc.render_command) {
      media.append(el("p", {}, "render it from the trace: ", el("code", {id: "render-command"}, doc.render_command)));
    }
    return;
  }
  state.fps = clip.fps || 30;
  if (clip.kind === "ansi") {
    const pre = el("pre", {id: "cast"});
    const button = el("button", {id: "cast-play"}, "play / pause");
    media.append(pre, button);
    const r = await fetch(clip.url);
    state.player = new CastPlayer(pre, await r.text());
    button.onclick = () => (state.player.paused ? state.player.play() : state.player.pause());
  } else {
    const video = el("video", {id: "player", src: clip.url, controls: "", muted: "", playsinline: "", preload: "auto"});
    video.muted = true;
    media.append(video);
    state.player = video;
  }
}

function showPlots(doc) {
  const domain = [doc.first_step, doc.first_step + doc.length];
  const s = doc.series;
  const groups = [["reward", [s.reward]], ["return", [s["return"]]]];
  for (const a of s.actions) groups.push([`action ${a.label}`, [a]]);
  for (const o of s.observations) groups.push([`observation ${o.label}`, [o]]);
  state.plots = groups.map(([label, series]) => new Plot(label, series, domain, doc.diverged_at));
  $("#plots").replaceChildren(...state.plots.map((p) => el("div", {}, p.box)));
  for (const p of state.plots) {
    p.canvas.addEventListener("click", (ev) => {
      const rect = p.canvas.getBoundingClientRect();
      seek(p.step((ev.clientX - rect.left) * (p.width / rect.width)));
    });
  }
  state.lastStep = -1;
  setCursor(stepOfPlayer() ?? doc.first_step);
}

async function loadEpisode(first) {
  const q = params();
  const dims = $("#obs-dims").value.trim();
  let url = `/api/episode?recording=${encodeURIComponent(q.recording)}&episode=${encodeURIComponent(q.episode)}&width=${plotWidth()}`;
  if (dims) url += `&obs=${encodeURIComponent(dims)}`;
  if (q.firstStep) url += `&first_step=${encodeURIComponent(q.firstStep)}`;
  let doc;
  try {
    doc = await getJSON(url);
  } catch (e) {
    $("#status").textContent = e.message;
    return;
  }
  $("#status").textContent = "";
  state.length = doc.length;
  state.firstStep = doc.first_step;
  $("#title").textContent = `${doc.recording}, episode ${doc.episode_id}`;
  const span = doc.first_step ? ` (steps ${doc.first_step}..${doc.first_step + doc.length - 1}: the ones before not kept)` : "";
  const parts = doc.parts > 1 ? `, in ${doc.parts} parts` : "";
  $("#summary").textContent = `${doc.length} steps${span}${parts}, return ${fmt(doc["return"])}, ended by ${doc.ended_by ?? "nothing yet (continues)"}` +
    `${doc.complete ? "" : " (incomplete)"}, seed ${fmt(doc.seed)}; observation has ${doc.observation_dims} dimension(s)`;
  if (!dims) $("#obs-dims").value = doc.series.observations.map((o) => o.dim).join(",");
  showVerdict(doc);
  if (first) await showMedia(doc);
  showPlots(doc);
  document.body.dataset.loaded = "1";
}

function showVerdict(doc) {
  const box = $("#verdict");
  box.replaceChildren();
  if (doc.verdict_detail) {
    const when = doc.verified_at ? ` (verified ${doc.verified_at})` : "";
    box.append(el("span", {class: verdictClass(doc.verdict_status), id: "verdict-text"}, `verify: ${doc.verdict_detail}${when}`));
  } else if (doc.verify_command) {
    box.append(el("span", {class: "muted", id: "verdict-text"}, "not verified: "), el("code", {}, doc.verify_command));
  }
}

async function showEpisode() {
  const q = params();
  if (q.obs) $("#obs-dims").value = q.obs;
  $("#apply-dims").onclick = () => loadEpisode(false);
  await loadEpisode(true);
  requestAnimationFrame(tick);
}


showEpisode();

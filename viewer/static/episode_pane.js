// envrec view: one episode on the episode page (its clip, observation image, plots, values and info at the cursor).
// The page shows one pane, or two side by side (compare); episode.js moves their one cursor. Needs viewer.js, plots.js.
"use strict";

const MIN_CLIP_PX = 480;  // a small clip (Atari's 160x210) is scaled up, by a whole factor, to at least this tall

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

function wholeScale(w, h, maxWidth) {
  // The whole factor that makes h at least MIN_CLIP_PX tall without w passing maxWidth (1: shown as it is).
  let s = Math.max(1, Math.ceil(MIN_CLIP_PX / Math.max(1, h)));
  while (s > 1 && s * w > maxWidth) s--;
  return s;
}

function imageText(image) {
  const frame = `${image.height}x${image.width}x${image.channels}`;
  const what = image.frames > 1 ? `a stack of ${image.frames} ${frame} frames (shown side by side, oldest left)` : `a ${frame} image`;
  return image.label ? `${image.label} is ${what}` : `is ${what}`;
}

function seedText(seed) {
  return seed === null || seed === undefined ? "not seeded" : `seed ${fmt(seed)}`;
}

class Latest {
  // Fetches what the cursor points at, one request at a time; a cursor moved meanwhile is fetched next (the latest wins).
  constructor(run) { this.run = run; this.busy = false; this.wanted = null; }
  want(key) {
    this.wanted = key;
    if (!this.busy) this.next();
  }
  async next() {
    const key = this.wanted;
    this.wanted = null;
    this.busy = true;
    try { await this.run(key); } catch (e) { /* the next cursor move asks again */ }
    this.busy = false;
    if (this.wanted !== null) this.next();
  }
}

class Pane {
  // n: 0 for the episode of the page's address, 1 for the one compared with (ids get "-2"); q: {recording, episode, firstStep}.
  constructor(n, q, width) {
    this.n = n;
    this.q = q;
    this.width = width;  // px the pane may take
    this.suffix = n ? `-${n + 1}` : "";
    this.player = null;
    this.fps = 30;
    this.plots = [];
    this.doc = null;
    this.playerStep = null;  // the step the player was last seen at (a change not made here moves the cursor)
    this.root = el("div", {class: "pane", id: this.id("pane")});
    this.parts = {};
    for (const name of ["heading", "summary", "verdict", "media", "readout", "plots", "step-info"]) {
      this.parts[name] = el(name === "heading" ? "h2" : "div", {class: name, id: this.id(name)});
      this.root.append(this.parts[name]);
    }
    this.readoutFetch = new Latest((step) => this.fetchReadout(step));
    this.images = [];  // each image leaf's {img, caption, image} (the episode's "images")
    this.imageFetch = new Latest((step) => this.fetchImage(step));
  }
  id(name) { return name + this.suffix; }
  get first() { return this.doc.first_step; }
  get last() { return this.doc.first_step + this.doc.length; }
  clamp(step) { return Math.max(this.first, Math.min(this.last, step)); }
  query() {
    let s = `recording=${encodeURIComponent(this.q.recording)}&episode=${encodeURIComponent(this.q.episode)}`;
    if (this.q.firstStep) s += `&first_step=${encodeURIComponent(this.q.firstStep)}`;
    return s;
  }
  async load(dims, withMedia) {
    let url = `/api/episode?${this.query()}&width=${this.plotWidth()}`;
    if (dims) url += `&obs=${encodeURIComponent(dims)}`;
    const doc = await getJSON(url);
    this.doc = doc;
    this.parts.heading.textContent = `${doc.recording}, episode ${doc.episode_id}`;
    const span = doc.first_step ? ` (steps ${doc.first_step}..${doc.first_step + doc.length - 1}: the ones before not kept)` : "";
    const parts = doc.parts > 1 ? `, in ${doc.parts} parts` : "";
    const images = doc.images || [];
    const obs = images.length ? `observation ${images.map(imageText).join(", ")}` + (images.length > 1 || images[0].label
                                ? `, ${doc.observation_dims} dimension(s) in all` : "")
                              : `observation has ${doc.observation_dims} dimension(s)`;
    this.parts.summary.textContent = `${doc.length} steps${span}${parts}, return ${fmt(doc["return"])}, ended by ` +
      `${doc.ended_by ?? "nothing yet (continues)"}${doc.complete ? "" : " (incomplete)"}, ${seedText(doc.seed)}; ${obs}`;
    this.showVerdict();
    if (withMedia) await this.showMedia();
    this.showPlots();
    return doc;
  }
  plotWidth() { return Math.max(300, Math.min(1200, Math.floor(this.width) - 90)); }
  showVerdict() {
    const doc = this.doc, box = this.parts.verdict;
    box.replaceChildren();
    if (doc.verdict_detail) {
      const when = doc.verified_at ? ` (verified ${doc.verified_at})` : "";
      box.append(el("span", {class: verdictClass(doc.verdict_status), id: this.id("verdict-text")}, `verify: ${doc.verdict_detail}${when}`));
    } else if (doc.verify_command) {
      box.append(el("span", {class: "muted", id: this.id("verdict-text")}, "not verified: "), el("code", {}, doc.verify_command));
    }
  }
  async showMedia() {
    const clip = this.doc.clip, media = this.parts.media, images = this.doc.images || [];
    media.replaceChildren();
    const each = images.length && clip && clip.url ? (this.width - 12) / 2 : this.width;  // a clip and the image(s) side by side
    if (!clip || !clip.url) {
      const none = el("div", {}, el("p", {class: "muted"}, "no clip of this episode: plots only"));
      if (this.doc.render_command) {
        none.append(el("p", {}, "render it from the trace: ", el("code", {id: this.id("render-command")}, this.doc.render_command)));
        if (this.doc.render_needs) none.append(el("p", {class: "muted", id: this.id("render-needs")}, this.doc.render_needs));
      }
      media.append(none);
    } else {
      this.fps = clip.fps || 30;
      if (clip.kind === "ansi") {
        const pre = el("pre", {id: this.id("cast"), class: "cast"});
        const button = el("button", {id: this.id("cast-play")}, "play / pause");
        media.append(el("div", {}, pre, button));
        const r = await fetch(clip.url);
        this.player = new CastPlayer(pre, await r.text());
        button.onclick = () => (this.player.paused ? this.player.play() : this.player.pause());
      } else {
        const video = el("video", {id: this.id("player"), class: "player", src: clip.url, controls: "", muted: "", playsinline: "",
                                   preload: "auto"});
        video.muted = true;
        video.addEventListener("loadedmetadata", () => this.scale(video, video.videoWidth, video.videoHeight, each));
        media.append(video);
        this.player = video;
      }
    }
    this.images = images.map((image, i) => {
      const img = el("img", {id: this.id(i ? `obs-image-${i}` : "obs-image"), class: "obs-image", "data-leaf": String(image.leaf),
                             "data-frames": String(image.frames), alt: `the observation${image.label ? " " + image.label : ""} at the cursor`});
      this.scale(img, image.png_width, image.png_height, each);  // a stack's PNG: its frames side by side
      const caption = el("div", {class: "muted"}, "observation");
      media.append(el("figure", {class: "obs-box"}, img, caption));
      return {img, caption, image};
    });
  }
  scale(node, w, h, maxWidth) {
    if (!w || !h) return;
    const s = wholeScale(w, h, maxWidth);
    node.style.width = `${w * s}px`;
    node.style.height = `${h * s}px`;
    node.dataset.scale = String(s);
  }
  showPlots() {
    const doc = this.doc, s = doc.series, domain = [doc.first_step, doc.first_step + doc.length], width = this.plotWidth();
    const groups = [["reward", [s.reward], null], ["return", [s["return"]], null]];
    const discrete = doc.action_space && s.actions.length === 1 ? doc.action_space : null;
    for (const a of s.actions) groups.push([discrete ? "action" : `action ${a.label}`, [a], discrete]);
    for (const o of s.observations) groups.push([`observation ${o.label}`, [o], null]);
    this.plots = groups.map(([label, series, d]) => new Plot(label, series, domain, doc.diverged_at, width, d));
    const axis = new Axis(domain, width);
    this.parts.plots.replaceChildren(...this.plots.map((p) => el("div", {}, p.box)), el("div", {class: "axis-box"}, el("span", {class: "axis-name"}, "step"), axis.canvas));
    for (const p of this.plots) {
      p.canvas.addEventListener("click", (ev) => {
        const rect = p.canvas.getBoundingClientRect();
        seek(p.step((ev.clientX - rect.left) * (p.width / rect.width)));
      });
    }
  }
  stepOfPlayer() {
    // Frame f of an episode's clip shows observation f (frame 0: the reset), and x is the observation index.
    if (!this.player || !this.doc) return null;
    return this.clamp(Math.floor(this.player.currentTime * this.fps + 1e-6));
  }
  seek(step) {
    const at = this.clamp(step);
    if (this.player) this.player.currentTime = (at + 0.5) / this.fps;
    this.playerStep = this.stepOfPlayer();
  }
  show(step) {
    // The cursor is at step (clamped to this episode): plots, readout, info and observation image follow.
    const at = this.clamp(step);
    for (const p of this.plots) p.moveCursor(at);
    this.root.dataset.cursorStep = String(at);
    this.readoutFetch.want(at);
    if (this.images.length) this.imageFetch.want(at);
  }
  async fetchReadout(step) {
    const dims = this.doc.series.observations.map((o) => o.dim).join(",");
    const d = await getJSON(`/api/step?${this.query()}&step=${step}${dims ? `&obs=${dims}` : ""}`);
    const bits = [`step ${d.step}`];
    if (d.reward === null && !d.actions.length) bits.push(d.step === 0 ? "the reset" : "the first step kept");
    else bits.push(`reward ${fmt(d.reward)}`, `return ${fmt(d["return"])}`);
    const space = this.doc.action_space;
    for (const a of d.actions) {
      if (space && d.actions.length === 1 && Number.isInteger(a.value)) {
        bits.push(space.named ? `action ${space.names[a.value - space.start] ?? "?"} (${a.value})` : `action ${a.value}`);
      } else {
        bits.push(`action${a.label === "value" ? "" : " " + a.label} ${fmt(a.value)}`);
      }
    }
    for (const o of d.observations) bits.push(`obs ${o.label} ${fmt(o.value)}`);
    if (d.terminated) bits.push("terminated");
    if (d.truncated) bits.push("truncated");
    this.parts.readout.textContent = bits.join(" \u00b7 ");
    this.parts.readout.dataset.step = String(d.step);
    this.showInfo(d.info);
  }
  showInfo(info) {
    const rows = info.items.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v)));
    const more = info.truncated ? [el("tr", {}, el("td", {colspan: "2", class: "muted"}, `${info.keys - info.items.length} more key(s) not shown`))] : [];
    const table = el("table", {class: "info"}, el("caption", {}, info.keys ? "info" : "info: empty"), ...rows, ...more);
    this.parts["step-info"].replaceChildren(table);
  }
  fetchImage(step) {
    return Promise.all(this.images.map(({img, caption, image}) => new Promise((resolve) => {
      const done = () => {
        img.dataset.step = String(step);
        caption.textContent = `observation${image.label ? " " + image.label : ""} ${step}` +
          (image.frames > 1 ? `: its ${image.frames} stacked frames, oldest left, newest right` : "");
        resolve();
      };
      img.onload = done;
      img.onerror = () => resolve();
      img.src = `/api/observation.png?${this.query()}&step=${step}&leaf=${image.leaf}`;
    })));
  }
}

// envrec view: the episode page: one episode, or two side by side (?compare=EPISODE or RECORDING:EPISODE), on one cursor.
// Needs viewer.js, plots.js, episode_pane.js.
//
// The cursor is a step (the episode's observation index, the plots' x): clicking a plot, the keys (left/right one step,
// shift: ten, Home/End, space plays and pauses) and a playing clip move it, and every pane follows. The address keeps
// it: #step=K (or #t=SECONDS of the clip) opens the page there, and moving the cursor rewrites it (replaceState).
"use strict";

const HASH_EVERY_MS = 250;  // the address is rewritten at most this often while a clip plays (browsers throttle more)
const state = {panes: [], step: null, hashAt: 0, hashTimer: null, ready: false};

function params() {
  // The episode comes from the query (?recording=...&episode=...); a link may give it in the hash instead.
  const q = new URLSearchParams(location.search), h = new URLSearchParams(location.hash.slice(1));
  const get = (k) => q.get(k) ?? h.get(k);
  return {recording: get("recording"), episode: get("episode"), obs: get("obs"), firstStep: get("first_step"),
          compare: get("compare"), step: h.get("step"), t: h.get("t")};
}

function compared(text, recording) {
  // "EPISODE" (of the same recording) or "RECORDING:EPISODE"
  const m = /^(?:(.*):)?(\d+)$/.exec((text || "").trim());
  return m ? {recording: m[1] || recording, episode: m[2], firstStep: null} : null;
}

function range() {
  const ready = state.panes.filter((p) => p.doc);
  return [Math.min(...ready.map((p) => p.first)), Math.max(...ready.map((p) => p.last))];
}

function setCursor(step) {
  if (step === null || step === state.step) return;
  state.step = step;
  document.body.dataset.cursorStep = String(step);
  for (const p of state.panes) if (p.doc) p.show(step);
  if (state.ready) writeHash();
}

function writeHash() {
  clearTimeout(state.hashTimer);
  const wait = state.hashAt + HASH_EVERY_MS - performance.now();
  if (wait > 0) { state.hashTimer = setTimeout(writeHash, wait); return; }
  state.hashAt = performance.now();
  const h = new URLSearchParams(location.hash.slice(1));
  h.delete("t");
  h.set("step", String(state.step));
  history.replaceState(null, "", `${location.pathname}${location.search}#${h.toString()}`);
}

function seek(step) {
  const [a, b] = range();
  const at = Math.max(a, Math.min(b, step));
  document.body.dataset.seekedTo = String(at);
  for (const p of state.panes) p.seek(at);
  setCursor(at);
}

function playing() {
  return state.panes.find((p) => p.player && !p.player.paused) || null;
}

function togglePlay() {
  const players = state.panes.map((p) => p.player).filter(Boolean);
  if (playing()) for (const pl of players) pl.pause();
  else for (const pl of players) { const r = pl.play(); if (r && r.catch) r.catch(() => {}); }
}

function onKey(ev) {
  if (ev.target instanceof HTMLInputElement || ev.ctrlKey || ev.metaKey || ev.altKey || !state.ready) return;
  const [a, b] = range(), by = ev.shiftKey ? 10 : 1, now = state.step ?? a;
  const moves = {ArrowRight: now + by, ArrowLeft: now - by, Home: a, End: b};
  if (ev.key in moves) {
    for (const p of state.panes) if (p.player && !p.player.paused) p.player.pause();
    seek(moves[ev.key]);
  } else if (ev.key === " ") {
    togglePlay();
  } else {
    return;
  }
  ev.preventDefault();  // not also the video's own keys, nor a scroll
  ev.stopPropagation();
}

function tick() {
  // A playing clip drives the cursor, and so does one moved by its own controls; the other pane follows.
  for (const p of state.panes) if (p.player instanceof CastPlayer && !p.player.paused) p.player.show();
  const driver = playing() || state.panes.find((p) => p.player && p.doc && p.stepOfPlayer() !== p.playerStep);
  if (driver && driver.doc) {
    const step = driver.stepOfPlayer();
    driver.playerStep = step;
    if (step !== state.step) {
      for (const p of state.panes) if (p !== driver && p.doc && p.player && Math.abs(p.stepOfPlayer() - p.clamp(step)) > 1) p.seek(step);
      setCursor(step);
    }
  }
  requestAnimationFrame(tick);
}

function followLink() {
  // Seek to the address's #step=K, or #t=SECONDS of the (first) clip.
  const q = params();
  const link = q.step !== null ? Number(q.step) : q.t !== null ? Math.floor(Number(q.t) * state.panes[0].fps + 1e-6) : null;
  if (link !== null && Number.isFinite(link)) seek(Math.round(link));
}

async function metadata(pane) {
  // A clip's duration is known (seeking works) once its metadata has loaded; a clip that never loads is waited for 5 s.
  const v = pane.player;
  if (!(v instanceof HTMLMediaElement) || v.readyState >= 1) return;
  await new Promise((resolve) => {
    v.addEventListener("loadedmetadata", resolve, {once: true});
    v.addEventListener("error", resolve, {once: true});
    setTimeout(resolve, 5000);
  });
}

async function loadPanes(withMedia) {
  const dims = $("#obs-dims").value.trim();
  $("#status").textContent = "";
  const got = await Promise.allSettled(state.panes.map((p) => p.load(dims, withMedia)));
  if (got[0].status === "rejected") throw got[0].reason;
  if (got[1] && got[1].status === "rejected") {  // the episode compared with is not there: show the page's own alone
    state.panes[1].root.remove();
    state.panes.length = 1;
    document.body.classList.remove("comparing");
    $("#status").textContent = `compare with: ${got[1].reason.message}`;
  }
  const docs = got.slice(0, state.panes.length).map((g) => g.value);
  const main = docs[0];
  $("#title").textContent = `${main.recording}, episode ${main.episode_id}` +
    (docs[1] ? ` compared with ${docs[1].recording}, episode ${docs[1].episode_id}` : "");
  if (!dims) $("#obs-dims").value = main.series.observations.map((o) => o.dim).join(",");
  if ((main.images || []).length) $("#obs-dims").placeholder = "none: the pixels are shown as images";
  const at = state.step;
  state.step = null;
  setCursor(at ?? state.panes[0].stepOfPlayer() ?? main.first_step);
}

async function showEpisode() {
  const q = params();
  if (q.obs) $("#obs-dims").value = q.obs;
  if (q.compare) $("#compare-with").value = q.compare;
  const other = compared(q.compare, q.recording);
  const width = Math.max(360, document.documentElement.clientWidth - 50);
  const each = other ? width / 2 - 16 : width;
  state.panes = [new Pane(0, q, each), ...(other ? [new Pane(1, other, each)] : [])];
  $("#panes").replaceChildren(...state.panes.map((p) => p.root));
  document.body.classList.toggle("comparing", Boolean(other));
  $("#apply-dims").onclick = () => loadPanes(false).catch((e) => { $("#status").textContent = e.message; });
  $("#apply-compare").onclick = () => {
    const u = new URL(location.href), text = $("#compare-with").value.trim();
    if (text && !compared(text, q.recording)) { $("#status").textContent = "compare with: EPISODE or RECORDING:EPISODE"; return; }
    if (text) u.searchParams.set("compare", text); else u.searchParams.delete("compare");
    location.assign(u.toString());
  };
  try {
    await loadPanes(true);
  } catch (e) {
    $("#status").textContent = e.message;
    return;
  }
  await Promise.all(state.panes.map(metadata));
  followLink();
  for (const p of state.panes) p.playerStep = p.stepOfPlayer();
  state.ready = true;
  window.addEventListener("keydown", onKey, true);
  window.addEventListener("hashchange", followLink);  // a link to another instant of this page, opened here
  document.body.dataset.loaded = "1";
  requestAnimationFrame(tick);
}

showEpisode();

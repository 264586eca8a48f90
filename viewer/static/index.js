// envrec view: the index. Recordings (from their manifests: counts, state, the episode running now), then a
// page of one recording's episodes and a page of clips, each sorted by the server. While a recording is being
// written the page polls every POLL_MS and stops when none is. Needs viewer.js.
"use strict";

const POLL_MS = 2000;  // how often a live recording is looked at again
const PAGE_ROWS = 100;
const view = {
  recording: undefined,  // the recording whose episodes are listed; null: all of them; undefined: not chosen yet
  episodes: {offset: 0, limit: PAGE_ROWS, sort: ""},
  clips: {offset: 0, limit: PAGE_ROWS, sort: ""},
  timer: null,
  polls: 0,
};

function episodeLink(recording, episode, firstStep) {
  // first_step tells apart the pieces of an episode split by a damaged part (0: from its reset)
  const from = firstStep ? `&first_step=${firstStep}` : "";
  return `/episode?recording=${encodeURIComponent(recording)}&episode=${episode}${from}`;
}

function verdictCell(e) {
  return el("td", {class: verdictClass(e.verdict_status)}, e.verdict || "");
}

function stateText(r) {
  if (r.state === "recording") return "recording…";
  if (r.state === "ended") return "ended (not closed cleanly)";
  return r.state;  // complete, interrupted
}

function endedText(e) {
  if (e.ended_by) return e.ended_by;
  return e.live ? "recording…" : "never ended (recording stopped)";
}

function pager(id, paging, doc, load) {
  // The page's rows, "first-last of total", previous/next; clicking a column header sorts by it (again: reversed).
  const box = $(`#${id}-pager`);
  const last = Math.min(doc.total, doc.offset + doc.episodesShown);
  box.querySelector(".info").textContent = doc.total ? `${doc.offset + 1}–${last} of ${doc.total}` : "none";
  const prev = box.querySelector(".prev"), next = box.querySelector(".next");
  prev.disabled = doc.offset === 0;
  next.disabled = doc.offset + doc.limit >= doc.total;
  prev.onclick = () => { paging.offset = Math.max(0, paging.offset - paging.limit); load(); };
  next.onclick = () => { paging.offset += paging.limit; load(); };
  const table = $(`#${id}`);
  for (const th of table.querySelectorAll("th")) {
    const key = th.dataset.key;
    th.classList.toggle("sorted-asc", doc.sort === key);
    th.classList.toggle("sorted-desc", doc.sort === `-${key}`);
    th.onclick = () => { paging.sort = doc.sort === key ? `-${key}` : key; paging.offset = 0; load(); };
  }
  document.body.dataset[`${id}Sort`] = doc.sort;
  document.body.dataset[`${id}Offset`] = String(doc.offset);
}

function query(paging) {
  return `offset=${paging.offset}&limit=${paging.limit}` + (paging.sort ? `&sort=${encodeURIComponent(paging.sort)}` : "");
}

async function loadEpisodes() {
  const p = view.episodes;
  const of = view.recording === null ? "" : `&recording=${encodeURIComponent(view.recording)}`;
  const doc = await getJSON(`/api/episodes?${query(p)}${of}`);
  if (doc.offset >= doc.total && doc.offset > 0) { p.offset = 0; return loadEpisodes(); }  // the page went away
  $("#episodes-of").textContent = view.recording === null ? "of every recording" : `of ${view.recording}`;
  $("#all-recordings").hidden = view.recording === null;
  $("#episodes tbody").replaceChildren(...doc.episodes.map((e) => el("tr", {"data-episode": e.episode_id, "data-recording": e.recording},
    el("td", {}, e.recording), el("td", {class: "num"}, el("a", {href: episodeLink(e.recording, e.episode_id, e.first_step)}, e.episode_id)),
    el("td", {class: "num"}, e.first_step ? `${e.length} (from step ${e.first_step})` : e.length),
    el("td", {class: "num"}, e.parts || 1), el("td", {class: "num"}, fmt(e.return)),
    el("td", e.live ? {class: "live"} : {}, endedText(e)),
    el("td", {}, e.complete ? "yes" : "no"), el("td", {}, e.clip || ""), verdictCell(e))));
  pager("episodes", p, {...doc, episodesShown: doc.episodes.length}, loadEpisodes);
}

async function loadClips() {
  const doc = await getJSON(`/api/clips?${query(view.clips)}`);
  $("#clips tbody").replaceChildren(...doc.clips.map((c) => el("tr", {},
    el("td", {}, c.url ? el("a", {href: c.url}, c.name) : c.name), el("td", {class: "num"}, fmt(c.episode_id)),
    el("td", {class: "num"}, fmt(c.frames)), el("td", {class: "num"}, fmt(c.fps)),
    el("td", {}, c.broken ? `broken: ${c.reason || ""}` : "ok"))));
  pager("clips", view.clips, {...doc, episodesShown: doc.clips.length}, loadClips);
}

function choose(name) {
  view.recording = name;
  view.episodes.offset = 0;
  loadEpisodes().catch((e) => { $("#episodes-of").textContent = e.message; });
}

function recordingRow(r) {
  const running = r.live_episode;
  const runningCell = running
    ? el("a", {href: episodeLink(r.name, running.episode_id, running.first_step), class: "running"},
      `episode ${running.episode_id}: ${running.steps} steps so far`)
    : "";
  const name = el("a", {href: "#", class: "choose"}, r.name);
  name.onclick = (ev) => { ev.preventDefault(); choose(r.name); };
  return el("tr", {"data-recording": r.name, "data-state": r.state, "data-steps": r.steps},
    el("td", {}, name), el("td", {}, r.env_id || ""), el("td", {class: "num"}, r.episodes),
    el("td", {class: "num"}, fmt(r.steps)),
    el("td", {class: r.state === "recording" ? "live" : r.state === "interrupted" || r.state === "ended" ? "stopped" : "", title: r.state_detail}, stateText(r)),
    el("td", {class: "num", "data-running-steps": running ? running.steps : ""}, runningCell),
    el("td", r.verify_command ? {class: "muted", title: r.verify_command} : {}, r.verify || ""));
}

async function showIndex() {
  view.timer = null;
  let doc;
  try {
    doc = await getJSON("/api/index");
  } catch (e) {
    $("#root").textContent = `cannot read the index: ${e.message}`;
    schedule(true);
    return;
  }
  $("#root").textContent = doc.root;
  $("#recordings tbody").replaceChildren(...doc.recordings.map(recordingRow));
  if (view.recording === undefined || (view.recording !== null && !doc.recordings.some((r) => r.name === view.recording))) {
    const live = doc.recordings.find((r) => r.state === "recording");
    view.recording = (live || doc.recordings[0] || {name: null}).name;  // no recording: every (none), clips only
  }
  const damaged = doc.damaged || [];
  $("#damaged").hidden = $("#damaged-title").hidden = !damaged.length;
  $("#damaged tbody").replaceChildren(...damaged.map((d) => el("tr", {class: "damaged"}, el("td", {}, d.file), el("td", {}, d.error))));
  try {
    await Promise.all([loadEpisodes(), loadClips()]);
  } catch (e) {
    $("#episodes-of").textContent = e.message;
  }
  $("#live-note").textContent = doc.live ? `(live: updated every ${POLL_MS / 1000} s)` : "";
  document.body.dataset.loaded = "1";
  view.polls += 1;
  document.body.dataset.polls = String(view.polls);
  schedule(doc.live);
}

function schedule(live) {
  document.body.dataset.polling = live ? "1" : "0";
  if (live && view.timer === null) view.timer = setTimeout(showIndex, POLL_MS);
}

$("#all-recordings").onclick = () => choose(null);
showIndex();

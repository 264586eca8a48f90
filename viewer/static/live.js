// envrec view: follows an episode still being recorded on the episode page. Every POLL_MS it asks the index how
// far the recording's running episode has got; when it has grown it draws the page again (episode.js's
// loadEpisode: new parts extend the plots), and it stops once the episode ended or the recording stopped.
// Needs viewer.js and episode.js (loaded before it): what it draws (liveShown) and how it draws again (liveRedraw).
"use strict";

const LIVE_POLL_MS = 2000;

const following = {steps: null, polls: 0};

function liveShown() {
  // The steps drawn, from the reset, as episode.js keeps them: its first pane's doc, or its state's length.
  if (typeof state !== "object" || !state) return null;
  const doc = Array.isArray(state.panes) && state.panes[0] ? state.panes[0].doc : null;
  if (doc && Number.isInteger(doc.length)) return doc.first_step + doc.length;
  return Number.isInteger(state.length) ? state.firstStep + state.length : null;
}

async function liveRedraw() {
  // episode.js draws the page again with the parts committed since: loadPanes (panes) or loadEpisode (one episode)
  if (typeof loadPanes === "function") await loadPanes(false);
  else if (typeof loadEpisode === "function") await loadEpisode(false);
}

function liveBox() {
  let box = $("#live-status");
  if (!box) {
    box = el("div", {id: "live-status"});
    $("h1").after(box);
  }
  return box;
}

async function followLive() {
  if (document.body.dataset.loaded !== "1") { setTimeout(followLive, 200); return; }
  const q = new URLSearchParams(location.search);
  const name = q.get("recording"), episode = Number(q.get("episode"));
  let doc;
  try {
    doc = await getJSON("/api/index");
  } catch (e) {
    setTimeout(followLive, LIVE_POLL_MS);
    return;
  }
  const r = doc.recordings.find((x) => x.name === name);
  const running = r && r.live_episode && r.live_episode.episode_id === episode ? r.live_episode : null;
  following.polls += 1;
  document.body.dataset.livePolls = String(following.polls);
  if (!running) {
    if (following.steps !== null) {  // it was growing: it ended or stopped since, draw it as it is now
      await liveRedraw();
      liveBox().textContent = !r ? "" : r.state === "recording" ? "the episode ended" : `the recording ${liveStateText(r)}`;
    }
    document.body.dataset.live = "0";
    return;
  }
  document.body.dataset.live = r.state === "recording" ? "1" : "0";
  const shown = liveShown();
  if (shown === null) return;  // an episode.js this file does not know: nothing to extend
  if (following.steps === null) following.steps = shown;
  if (running.steps > following.steps) {
    following.steps = running.steps;
    await liveRedraw();
  }
  document.body.dataset.liveSteps = String(liveShown());
  const box = liveBox();
  box.className = r.state === "recording" ? "live" : "stopped";
  box.textContent = r.state === "recording"
    ? `recording: ${running.steps} steps so far, updated every ${LIVE_POLL_MS / 1000} s`
    : `the recording ${liveStateText(r)}: ${r.state_detail}`;
  if (r.state === "recording") setTimeout(followLive, LIVE_POLL_MS);
}

function liveStateText(r) {
  if (r.state === "interrupted") return "stopped (interrupted)";
  return r.state === "recording" ? "is recording" : r.state;
}

setTimeout(followLive, 200);

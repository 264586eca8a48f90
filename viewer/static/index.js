// envrec view: the index (recordings, episodes, clips). Needs viewer.js.
"use strict";

const sortState = {};

function sortable(table, rows, render) {
  const id = table.id;
  const apply = () => {
    const s = sortState[id];
    const sorted = rows.slice();
    if (s) {
      sorted.sort((a, b) => {
        const x = a[s.key], y = b[s.key];
        if (x === y) return 0;
        if (x === null || x === undefined) return 1;
        if (y === null || y === undefined) return -1;
        return (x < y ? -1 : 1) * s.dir;
      });
    }
    for (const th of table.querySelectorAll("th")) {
      th.classList.toggle("sorted-asc", !!s && th.dataset.key === s.key && s.dir === 1);
      th.classList.toggle("sorted-desc", !!s && th.dataset.key === s.key && s.dir === -1);
    }
    const body = table.querySelector("tbody");
    body.replaceChildren(...sorted.map(render));
  };
  for (const th of table.querySelectorAll("th")) {
    th.onclick = () => {
      const s = sortState[id];
      sortState[id] = {key: th.dataset.key, dir: s && s.key === th.dataset.key ? -s.dir : 1};
      apply();
    };
  }
  apply();
}

function episodeLink(recording, episode, firstStep) {
  // first_step tells apart the pieces of an episode split by a damaged part (0: from its reset)
  const from = firstStep ? `&first_step=${firstStep}` : "";
  return `/episode?recording=${encodeURIComponent(recording)}&episode=${episode}${from}`;
}

function verdictCell(e) {
  return el("td", {class: verdictClass(e.verdict_status)}, e.verdict || "");
}

async function showIndex() {
  let doc;
  try {
    doc = await getJSON("/api/index");
  } catch (e) {
    $("#root").textContent = `cannot read the index: ${e.message}`;
    return;
  }
  $("#root").textContent = doc.root;
  sortable($("#recordings"), doc.recordings, (r) => el("tr", {},
    el("td", {}, r.name), el("td", {}, r.env_id || ""), el("td", {class: "num"}, r.episodes),
    el("td", {class: "num"}, r.steps), el("td", r.complete ? {} : {class: "live"}, r.complete ? "complete" : "recording"),
    el("td", r.verify_command ? {class: "muted", title: r.verify_command} : {}, r.verify || "")));
  sortable($("#episodes"), doc.episodes, (e) => el("tr", {"data-episode": e.episode_id},
    el("td", {}, e.recording), el("td", {class: "num"}, el("a", {href: episodeLink(e.recording, e.episode_id, e.first_step)}, e.episode_id)),
    el("td", {class: "num"}, e.first_step ? `${e.length} (from step ${e.first_step})` : e.length),
    el("td", {class: "num"}, e.parts || 1), el("td", {class: "num"}, fmt(e.return)), el("td", {}, e.ended_by),
    el("td", {}, e.complete ? "yes" : "no"), el("td", {}, e.clip || ""), verdictCell(e)));
  sortable($("#clips"), doc.clips, (c) => el("tr", {},
    el("td", {}, c.url ? el("a", {href: c.url}, c.name) : c.name), el("td", {class: "num"}, fmt(c.episode_id)),
    el("td", {class: "num"}, fmt(c.frames)), el("td", {class: "num"}, fmt(c.fps)),
    el("td", {}, c.broken ? `broken: ${c.reason || ""}` : "ok")));
  const damaged = doc.damaged || [];
  $("#damaged").hidden = $("#damaged-title").hidden = !damaged.length;
  sortable($("#damaged"), damaged, (d) => el("tr", {class: "damaged"}, el("td", {}, d.file), el("td", {}, d.error)));
  document.body.dataset.loaded = "1";
  if (doc.recordings.some((r) => !r.complete)) setTimeout(showIndex, 3000);  // live: refresh
}


showIndex();

// envrec view: what both pages use (the index page is index.js, the episode page episode.js).
// Plain JavaScript and canvas: no library, no network beyond the server that sent this page.
"use strict";

const $ = (sel) => document.querySelector(sel);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(c == null ? "" : String(c)));
  return node;
}

async function getJSON(url) {
  const r = await fetch(url, {cache: "no-store"});
  const doc = await r.json();
  if (!r.ok) throw new Error(doc.error || r.statusText);
  return doc;
}

function fmt(v) {
  if (v === null || v === undefined) return "";
  if (typeof v === "number" && !Number.isInteger(v)) return v.toPrecision(6).replace(/\.?0+$/, "");
  return String(v);
}

function verdictClass(status) {
  // status is one the server checked: reproduced, diverged or cannot_replay
  return status ? `verdict verdict-${status}` : "verdict";
}

// The review page: reads /api/state, draws the list, the detail panes and the threshold; marks go to /api/label.
"use strict";
const $ = (id) => document.getElementById(id);
let state = null, selected = null;
const hidden = new Set();                 // defect types filtered out

function enc(name) { return name.split("/").map(encodeURIComponent).join("/"); }
function threshold() { return parseFloat($("threshold").value); }

async function load() {
  const r = await fetch("/api/state");
  state = await r.json();
  const scores = state.images.map((i) => i.score);
  const lo = Math.min(...scores), hi = Math.max(...scores), pad = (hi - lo) * 0.02 || 1;
  const t = $("threshold");
  t.min = lo - pad; t.max = hi + pad;
  if (!t.dataset.init) { t.value = state.threshold ?? (lo + hi) / 2; t.dataset.init = "1"; }
  const mark = $("calibrated-mark");
  if (state.threshold === null) { mark.style.display = "none"; $("reset-threshold").disabled = true; }
  else {
    mark.style.left = (100 * (state.threshold - t.min) / (t.max - t.min)) + "%";
    $("reset-threshold").textContent = "calibrated " + state.threshold.toFixed(3);
  }
  drawFilters();
  draw();
  if (selected === null && state.images.length) select(state.images[0].name);
}

function drawFilters() {
  const box = $("filters");
  box.replaceChildren();
  for (const type of state.types) {
    const l = document.createElement("label");
    const c = document.createElement("input");
    c.type = "checkbox"; c.checked = !hidden.has(type); c.dataset.type = type;
    c.addEventListener("change", () => { c.checked ? hidden.delete(type) : hidden.add(type); draw(); });
    l.append(c, " " + type);
    box.append(l);
  }
}

// a file changed on disk since it was scored has no score of its own until review scores it again
function shownScore(i) { return i.changed ? "\u2014" : i.score.toFixed(3); }
function flagged(i, t) { return !i.changed && i.score > t; }

function visible() { return state.images.filter((i) => !i.type || !hidden.has(i.type)); }

function draw() {
  const t = threshold(), shown = visible();
  $("threshold-value").textContent = t.toFixed(3);
  const n = shown.filter((i) => flagged(i, t)).length;
  $("flagged").textContent = `${n} of ${shown.length} flagged (${shown.length ? (100 * n / shown.length).toFixed(1) : 0}%)`;
  const marks = state.images.filter((i) => i.label);
  $("marked-count").textContent = `${marks.filter((i) => i.label === "normal").length} marked normal, ` +
    `${marks.filter((i) => i.label === "defect").length} defect`;
  const list = $("list");
  list.replaceChildren();
  for (const i of shown) {
    const row = document.createElement("div");
    row.className = "item" + (flagged(i, t) ? " flagged" : "") + (i.name === selected ? " selected" : "");
    row.dataset.name = i.name;
    const img = document.createElement("img");
    img.loading = "lazy"; img.alt = "";
    if (i.changed) { row.classList.add("changed"); row.title = i.name + " " + state.changed_note; }
    else img.src = "/image/" + enc(i.name);               // a changed file is not shown: its score is another's
    const text = document.createElement("div");
    text.innerHTML = `<div class="score"></div><div class="name"></div>`;
    text.querySelector(".score").textContent = shownScore(i);
    text.querySelector(".name").textContent = i.name;
    for (const tag of [i.label, i.changed ? "changed" : null]) {
      if (!tag) continue;
      const b = document.createElement("span");
      b.className = "badge " + tag; b.textContent = tag;
      text.append(b);
    }
    row.append(img, text);
    row.addEventListener("click", () => select(i.name));
    list.append(row);
  }
}

function select(name) {
  const i = state.images.find((x) => x.name === name);
  if (!i) return;
  selected = name;
  $("detail-name").textContent = i.name;
  $("detail-score").textContent = "score " + shownScore(i);
  $("detail-label").textContent = i.label ? "marked " + i.label : "";
  $("notice").hidden = !i.changed;
  $("panes").hidden = !!i.changed;
  $("mark-normal").disabled = $("mark-defect").disabled = !!i.changed;
  if (i.changed) {                       // never the new file beside the old file's score and map
    $("notice").textContent = i.name + ": " + state.changed_note;
    for (const id of ["photo", "under", "map"]) $(id).removeAttribute("src");
  } else {
    const src = "/image/" + enc(i.name), map = i.overlay ? "/overlay/" + enc(i.overlay) : null;
    if ($("photo").getAttribute("src") !== src) $("photo").src = $("under").src = src;
    if (!map) $("map").removeAttribute("src"); else if ($("map").getAttribute("src") !== map) $("map").src = map;
    $("map").style.display = $("under").style.display = i.overlay ? "" : "none";
    $("no-map").hidden = !!i.overlay;
  }
  draw();
}

async function refresh() {               // marks from other tabs, files changed on disk
  await load();
  if (selected !== null) select(selected);
}

async function mark(label) {
  if (selected === null) return;
  const r = await fetch("/api/label", { method: "POST", headers: { "Content-Type": "application/json" },
                                          body: JSON.stringify({ image: selected, label: label }) });
  if (!r.ok && r.status !== 409) { alert("the mark was not saved: " + r.status); return; }
  await refresh();                       // 409: the image changed on disk; the page says so
}

function step(d) {
  const shown = visible(), k = shown.findIndex((i) => i.name === selected);
  const next = shown[Math.min(shown.length - 1, Math.max(0, k + d))];
  if (next) select(next.name);
}

$("threshold").addEventListener("input", draw);
$("reset-threshold").addEventListener("click", () => { $("threshold").value = state.threshold; draw(); });
$("opacity").addEventListener("input", (e) => { $("map").style.opacity = e.target.value; });
$("mark-normal").addEventListener("click", () => mark("normal"));
$("mark-defect").addEventListener("click", () => mark("defect"));
$("mark-clear").addEventListener("click", () => mark(null));
document.addEventListener("keydown", (e) => {
  if (e.target.tagName === "INPUT") return;
  const keys = { n: () => mark("normal"), d: () => mark("defect"), c: () => mark(null), ArrowDown: () => step(1),
                 ArrowUp: () => step(-1), j: () => step(1), k: () => step(-1) };
  if (keys[e.key]) { e.preventDefault(); keys[e.key](); }
});
let failed = null;                       // the photo that did not load (409: changed on disk): ask the state once
$("photo").addEventListener("error", () => {
  const src = $("photo").getAttribute("src");
  if (src && src !== failed) { failed = src; refresh(); }
});
window.addEventListener("focus", refresh);   // marks made in another tab show up here
setInterval(() => { if (!document.hidden) refresh(); }, 5000);   // and in a tab side by side with it
load();

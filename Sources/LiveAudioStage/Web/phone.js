// A phone's page for the evening: join with a name (kept on the phone), find songs as you type, queue one (a part,
// a partner and the key for a duet), see your own songs and your place, take one out. One WebSocket to the stage,
// as the big screen's; every text from the stage is shown as text (textContent), never as markup.
"use strict";

import { Mic } from "/mic.js";

const $ = (id) => document.getElementById(id);
const guest = new URLSearchParams(location.search).get("guest");

// What the page knows, also for tests.
const phone = { connected: false, hello: null, me: null, queue: null, results: [], replies: [], searches: 0, socket: null };
window.phone = phone;

// The phone's own secret (its identity on the stage) and its name, kept across reloads.
function secret() {
  let s = localStorage.getItem("liveaudio.phone");
  if (!s || !/^[A-Za-z0-9_-]{16,64}$/.test(s)) {
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    s = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
    localStorage.setItem("liveaudio.phone", s);
  }
  return s;
}

let socket = null;
let backoff = 500;
let nextId = 1;
const pending = new Map();
// Singing with this phone, when the room takes phones and this singer's song is on or next.
const mic = new Mic(() => socket, { start: "mic-start", calibrate: "mic-calibrate", state: "mic-state", level: "mic-level", lane: "mic-lane",
                                    echoCancellation: "mic-echo", noiseSuppression: "mic-noise", autoGainControl: "mic-gain" });

function connect() {
  socket = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws` + (guest ? `?guest=${encodeURIComponent(guest)}` : ""));
  phone.socket = socket;
  socket.onopen = () => {
    phone.connected = true;
    backoff = 500;
    $("connection").textContent = "connected";
    const name = localStorage.getItem("liveaudio.name");
    if (name) join(name);
  };
  socket.onmessage = (event) => {
    let m;
    try { m = JSON.parse(event.data); } catch { return; }
    if (mic.onMessage(m)) return;
    if (m.type === "hello") {
      phone.hello = m;
      $("mic").hidden = !mic.available(m);
      if (mic.available(m)) mic.bind();
    }
    else if (m.type === "queue") onQueue(m);
    else if (m.type === "reply") {
      phone.replies.push(m);
      const done = pending.get(m.id);
      pending.delete(m.id);
      if (done) done(m);
    }
  };
  socket.onclose = (event) => {
    phone.connected = false;
    if (event.code === 1008) mic.onPolicyClose(event.reason);
    if (event.code === 1000 && event.reason === "the session has ended") {
      $("connection").textContent = "the evening has ended";
      return;
    }
    $("connection").textContent = "connection lost: reconnecting…";
    setTimeout(connect, backoff);
    backoff = Math.min(4000, backoff * 2);
  };
  socket.onerror = () => {};
}

// Sends an evening request; `done` gets the reply.
function request(action, fields, done) {
  if (!socket || socket.readyState !== WebSocket.OPEN) return;
  const id = String(nextId++);
  if (done) pending.set(id, done);
  socket.send(JSON.stringify({ type: "evening", id, action, ...fields }));
}

function join(name) {
  request("join", { name, phone: secret() }, (r) => {
    if (!r.ok) {
      $("join-note").textContent = r.error;
      showJoined(false);
      return;
    }
    phone.me = r.data;
    localStorage.setItem("liveaudio.name", r.data.name);
    $("join-note").textContent = "";
    $("my-name").textContent = r.data.name;
    $("pick-key").value = r.data.key;
    $("pick-difficulty").value = r.data.difficulty;
    showJoined(true);
    if (phone.queue) onQueue(phone.queue);
    // A phone that was singing takes its voice again (as the singer it joined as).
    mic.onOpen();
  });
}

function showJoined(joined) {
  $("name-form").hidden = joined;
  $("me").hidden = !joined;
  $("search-section").hidden = !joined;
  $("mine-section").hidden = !joined;
}

$("name-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const name = $("name").value.trim();
  if (name) join(name);
});
$("rename").addEventListener("click", () => {
  $("name").value = phone.me ? phone.me.name : "";
  $("name-form").hidden = false;
  $("me").hidden = true;
});

// As you type: a search a keystroke, the newest answer shown.
let searchSerial = 0;
$("search").addEventListener("input", () => {
  const text = $("search").value;
  const serial = ++searchSerial;
  phone.searches += 1;
  request("search", { text }, (r) => {
    if (serial !== searchSerial || !r.ok) return;
    phone.results = r.data;
    showResults(r.data);
  });
});

function minutes(s) {
  if (s === null || s === undefined) return "";
  s = Math.max(0, Math.round(s));
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
}

function showResults(songs) {
  const list = $("results");
  list.replaceChildren();
  for (const song of songs) {
    const li = document.createElement("li");
    const b = document.createElement("button");
    b.type = "button";
    b.className = "result";
    b.dataset.song = song.id;
    b.textContent = `${song.artist ? song.artist + " – " : ""}${song.title}${song.duet ? " (duet)" : ""} ${minutes(song.length)}`;
    b.addEventListener("click", () => pick(song));
    li.append(b);
    list.append(li);
  }
}

let picked = null;
function pick(song) {
  picked = song;
  $("pick").hidden = false;
  $("pick-title").textContent = `${song.artist ? song.artist + " – " : ""}${song.title}`;
  $("pick-note").textContent = "";
  const parts = $("pick-part");
  parts.replaceChildren();
  for (const [i, p] of song.parts.entries()) {
    const o = document.createElement("option");
    o.value = p;
    o.textContent = `P${p}${song.singers[i] ? " (" + song.singers[i] + ")" : ""}`;
    parts.append(o);
  }
  $("pick-parts-row").hidden = !song.duet;
}

$("pick-cancel").addEventListener("click", () => { $("pick").hidden = true; picked = null; });
$("pick-queue").addEventListener("click", () => {
  if (!picked) return;
  const fields = { song: picked.id, key: Number($("pick-key").value) || 0, difficulty: $("pick-difficulty").value };
  if (picked.duet) {
    fields.part = Number($("pick-part").value);
    const partner = $("pick-partner").value.trim();
    if (partner) fields.partner = partner;
  }
  request("queue", fields, (r) => {
    if (!r.ok) { $("pick-note").textContent = r.error; return; }
    $("pick").hidden = true;
    picked = null;
  });
});

// The queue: everyone's, and this phone's own songs with their place, wait and a remove button.
function onQueue(q) {
  phone.queue = q;
  phone.queueSeen = phone.queueSeen || {};
  for (const e of q.entries) if (!(e.id in phone.queueSeen)) phone.queueSeen[e.id] = Date.now();
  $("queue-paused").hidden = !q.paused;
  const all = $("queue");
  all.replaceChildren();
  const mine = $("mine");
  mine.replaceChildren();
  for (const e of q.entries) {
    const who = e.singer ? e.singer.name : "";
    const text = `${who}${e.partner ? " & " + e.partner.name : ""}: ${e.title}${e.state === "up" ? " — up next" : ""}`;
    const li = document.createElement("li");
    li.dataset.entry = e.id;
    li.textContent = text;
    all.append(li);
    if (phone.me && e.singer && e.singer.id === phone.me.id) {
      const m = document.createElement("li");
      m.dataset.entry = e.id;
      const label = document.createElement("span");
      label.textContent = `#${e.place} ${e.title} — in about ${minutes(e.startsAfter)}`;
      const b = document.createElement("button");
      b.type = "button";
      b.className = "small remove";
      b.textContent = "remove";
      b.addEventListener("click", () => request("dequeue", { entry: e.id }));
      m.append(label, " ", b);
      mine.append(m);
    }
  }
}

connect();
